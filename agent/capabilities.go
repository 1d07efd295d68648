package agent

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Node roles reported in NodeCapabilities.Role.
const (
	RoleHost = "host" // this host's own NIC has an eswitch in switchdev mode
	RoleDPU  = "dpu"  // the Arm side of a DPU, holding an external host's representors
	RoleNone = "none"
)

// Agent modes.
const (
	ModeAuto     = "auto"
	ModeSoftware = "software"
	ModeOffload  = "offload"
	ModeDPU      = "dpu"
	ModeDPUHost  = "dpu-host"
)

// Capabilities turns what eswitch discovery found into the capabilities the
// agent registers. kernel is the running kernel's release. n may be nil (no
// discovery): the node then has no PF and runs software only.
func Capabilities(n *eswitch.Node, kernel string) *skiffv1.NodeCapabilities {
	c := &skiffv1.NodeCapabilities{Role: RoleNone, Modes: []string{ModeSoftware}, Kernel: kernel}
	if n == nil {
		return c
	}
	switch n.Kind {
	case eswitch.NodeEswitch:
		c.Role = RoleHost
	case eswitch.NodeDPU:
		c.Role = RoleDPU
	}
	switchdev := false
	for i := range n.PFs {
		pf := &n.PFs[i]
		p := &skiffv1.PhysicalFunction{
			Name:        pf.Netdev,
			EswitchMode: string(pf.Mode),
			NumVfs:      uint32(max(pf.NumVFs, 0)),
			TotalVfs:    uint32(max(pf.TotalVFs, 0)), // -1: the device does not say
			SwitchId:    pf.SwitchID,
		}
		if pf.Bus == "pci" {
			p.PciAddress = pf.Device
		}
		if pf.Uplink != nil {
			p.UplinkRepresentor = pf.Uplink.Netdev
		}
		seen := map[int]bool{}
		for _, vf := range pf.VFs {
			seen[vf.Index] = true
			p.Vfs = append(p.Vfs, &skiffv1.VirtualFunction{
				Index:       uint32(max(vf.Index, 0)),
				PciAddress:  vf.PCIAddress,
				Netdev:      vf.Netdev,
				Representor: vf.Representor,
				Driver:      vf.Driver,
			})
		}
		// VFs that are not PCI functions (netdevsim; some SmartNICs)
		// have no virtfnN link: their representors are all there is.
		for _, r := range pf.Representors {
			if r.Port.Kind != eswitch.PortVF || r.Port.External || r.Port.VF < 0 || seen[r.Port.VF] {
				continue
			}
			seen[r.Port.VF] = true
			p.Vfs = append(p.Vfs, &skiffv1.VirtualFunction{Index: uint32(r.Port.VF), Representor: r.Netdev})
		}
		slices.SortFunc(p.Vfs, func(a, b *skiffv1.VirtualFunction) int { return cmp.Compare(a.Index, b.Index) })
		if pf.Mode == eswitch.ModeSwitchdev {
			switchdev = true
		}
		c.Pfs = append(c.Pfs, p)
	}
	if switchdev {
		c.Modes = append(c.Modes, ModeOffload)
	}
	if n.Kind == eswitch.NodeDPU {
		c.Modes = append(c.Modes, ModeDPU)
	}
	return c
}

// DiscoverCapabilities runs eswitch discovery and converts its result.
// Discovery problems are logged, never returned: a node whose sysfs cannot
// be read still runs the software datapath.
func DiscoverCapabilities(ctx context.Context, d *eswitch.Discoverer, log *slog.Logger) *skiffv1.NodeCapabilities {
	kernel, err := KernelRelease()
	if err != nil {
		log.Warn("capabilities: kernel release", "err", err)
	}
	n, err := d.Discover(ctx)
	if err != nil {
		log.Error("capabilities: eswitch discovery failed; reporting software only", "err", err)
		return Capabilities(nil, kernel)
	}
	for _, p := range n.Problems {
		log.Warn("capabilities: eswitch discovery problem", "err", p)
	}
	c := Capabilities(n, kernel)
	log.Debug("capabilities discovered", "role", c.Role, "pfs", len(c.Pfs), "modes", strings.Join(c.Modes, ","))
	return c
}

// KernelRelease is uname -r.
func KernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// ChooseMode decides the agent mode from the --mode flag and the node's
// capabilities: "software" is always possible; "auto" picks dpu on a DPU's
// Arm side (discovery found representors of an external host), offload
// when the node has an eswitch in switchdev mode, and software otherwise;
// "offload" requires such an eswitch. "dpu" and "dpu-host" are taken when
// asked (a test bench runs them without a DPU).
func ChooseMode(flag string, caps *skiffv1.NodeCapabilities) (string, error) {
	offload := slices.Contains(caps.GetModes(), ModeOffload)
	switch flag {
	case ModeSoftware:
		return ModeSoftware, nil
	case ModeAuto, "":
		if slices.Contains(caps.GetModes(), ModeDPU) {
			return ModeDPU, nil
		}
		if offload {
			return ModeOffload, nil
		}
		return ModeSoftware, nil
	case ModeOffload:
		if !offload {
			return "", fmt.Errorf("--mode offload: this node has no eswitch in switchdev mode (%s); "+
				"switch one with `devlink dev eswitch set <bus/device> mode switchdev`, or use --mode auto or software",
				describePFs(caps))
		}
		return ModeOffload, nil
	case ModeDPU, ModeDPUHost:
		// A DPU's agent runs the software datapath where its Arm side
		// has no eswitch in switchdev mode (the host-kernel test
		// bench), the offload one where it has.
		return flag, nil
	}
	return "", fmt.Errorf("--mode: %q is not auto, software, offload, dpu or dpu-host", flag)
}

func describePFs(caps *skiffv1.NodeCapabilities) string {
	if len(caps.GetPfs()) == 0 {
		return "no SR-IOV PF found"
	}
	var parts []string
	for _, p := range caps.GetPfs() {
		m := p.GetEswitchMode()
		if m == "" {
			m = "no eswitch"
		}
		parts = append(parts, fmt.Sprintf("PF %s: %s", p.GetName(), m))
	}
	return strings.Join(parts, ", ")
}

// hasDevice reports whether a netdev has a device/ link in sysfs (a NIC
// port, VF or representor rather than a virtual interface).
func hasDevice(sysRoot, netdev string) bool {
	if netdev == "" || strings.ContainsRune(netdev, '/') {
		return false
	}
	_, err := os.Stat(filepath.Join(sysRoot, "class", "net", netdev, "device"))
	return err == nil
}

// capNetdevs lists the netdevs capabilities name (PFs, uplinks, VF netdevs
// and representors).
func capNetdevs(c *skiffv1.NodeCapabilities) map[string]bool {
	m := map[string]bool{}
	for _, p := range c.GetPfs() {
		m[p.GetName()] = true
		m[p.GetUplinkRepresentor()] = true
		for _, vf := range p.GetVfs() {
			m[vf.GetNetdev()] = true
			m[vf.GetRepresentor()] = true
		}
	}
	delete(m, "")
	return m
}

func (a *Agent) namedInCaps(netdev string) bool {
	a.capsMu.Lock()
	defer a.capsMu.Unlock()
	return capNetdevs(a.caps)[netdev]
}

// rediscoverSoon asks rediscoverLoop for a discovery once events settle.
func (a *Agent) rediscoverSoon() {
	select {
	case a.rediscover <- struct{}{}:
	default:
	}
}

// rediscoverLoop discovers capabilities again when NIC netdevs come or go
// (VF count or eswitch mode changed), once no such event has arrived for
// cfg.Rediscover, and registers the node again only when the capabilities
// changed: registering an unchanged node is a no-op write, and nothing
// changing means nothing is sent.
func (a *Agent) rediscoverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.rediscover:
		}
		// Debounce: a VF count change removes and adds many representors.
		t := time.NewTimer(a.cfg.Rediscover)
	settle:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-a.rediscover:
				t.Reset(a.cfg.Rediscover)
			case <-t.C:
				break settle
			}
		}
		caps := a.discover(ctx)
		a.capsMu.Lock()
		keepHeldVFs(a.caps, caps, a.heldVF)
		same := proto.Equal(caps, a.caps)
		if !same {
			a.caps = caps
		}
		a.capsMu.Unlock()
		if same {
			a.log.Debug("capabilities unchanged after link events")
			continue
		}
		// The mode is chosen once, at start; the registered mode does not
		// follow later changes (restart the agent for that).
		if a.cfg.Mode == ModeOffload && !slices.Contains(caps.GetModes(), ModeOffload) {
			a.log.Warn("--mode offload: the node no longer has an eswitch in switchdev mode", "pfs", describePFs(caps))
		}
		a.log.Info("capabilities changed; registering again", "role", caps.GetRole(), "pfs", len(caps.GetPfs()), "modes", strings.Join(caps.GetModes(), ","))
		a.reregister(ctx)
	}
}

// reregister sends the node object again, retrying until it is accepted,
// the context ends, or newer capabilities are waiting (the next round
// sends those).
func (a *Agent) reregister(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := a.client.Register(rctx, &skiffv1.RegisterRequest{Node: a.nodeObject()})
		cancel()
		if err == nil {
			return
		}
		a.log.Warn("registering changed capabilities; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if len(a.rediscover) > 0 {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// heldVF says whether one of this node's endpoints holds VF idx of pf.
func (a *Agent) heldVF(pf *skiffv1.PhysicalFunction, idx uint32) bool {
	for _, e := range a.current().Local {
		if (e.Kind == plan.KindVF || e.Kind == plan.KindVFIO) && e.VFIndex == int(idx) && e.PF != "" && (e.PF == pf.GetName() || e.PF == pf.GetPciAddress()) {
			return true
		}
	}
	return false
}

// keepHeldVFs reports a VF that an endpoint holds as it was before the
// endpoint took it: a VF moved into a pod leaves the host's namespace
// (its netdev, or the whole VF where only a netdev stands for it, is gone
// from discovery), and that is the endpoint's doing, not a change of the
// node's capabilities. Without this every VF pod's ADD and DEL made the
// agent register again.
func keepHeldVFs(old, caps *skiffv1.NodeCapabilities, held func(*skiffv1.PhysicalFunction, uint32) bool) {
	olds := map[string]*skiffv1.PhysicalFunction{}
	for _, p := range old.GetPfs() {
		olds[p.GetName()] = p
	}
	for _, p := range caps.GetPfs() {
		o := olds[p.GetName()]
		if o == nil {
			continue
		}
		changed := false
		for _, ov := range o.GetVfs() {
			if !held(p, ov.GetIndex()) {
				continue
			}
			i := slices.IndexFunc(p.Vfs, func(v *skiffv1.VirtualFunction) bool { return v.GetIndex() == ov.GetIndex() })
			if i < 0 {
				p.Vfs = append(p.Vfs, proto.Clone(ov).(*skiffv1.VirtualFunction))
				changed = true
				continue
			}
			p.Vfs[i] = proto.Clone(ov).(*skiffv1.VirtualFunction)
		}
		if changed {
			slices.SortFunc(p.Vfs, func(a, b *skiffv1.VirtualFunction) int { return cmp.Compare(a.GetIndex(), b.GetIndex()) })
		}
	}
}
