package eswitch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// netdev is one entry of class/net as discovery sees it.
type netdev struct {
	name     string
	dir      string // class/net/<name>
	devPath  string // resolved device directory, "" when the netdev has none
	bus      string // basename of device/subsystem
	devName  string // basename of the device directory
	switchID string
	portName string
	port     *PortName // parsed portName, nil when absent
}

// Discover reads sysfs and devlink and returns the node's PFs, VFs and
// representors. It fails only when class/net cannot be listed; a problem
// with one object is recorded in Node.Problems and the object left out.
func (d *Discoverer) Discover(ctx context.Context) (*Node, error) {
	classNet := filepath.Join(d.sys, "class", "net")
	ents, err := os.ReadDir(classNet)
	if err != nil {
		return nil, fmt.Errorf("eswitch: %w", pathErr(classNet, "cannot list netdevs", err))
	}
	node := &Node{}
	var devs []*netdev
	for _, e := range ents {
		nd, err := d.readNetdev(e.Name())
		if err != nil {
			node.Problems = append(node.Problems, err)
			continue
		}
		devs = append(devs, nd)
	}

	// PFs: one per device with SR-IOV attributes or an uplink port. The PF
	// netdev of a device is its uplink (pN) or, without a switch port, the
	// netdev with no port name.
	byDev := map[string]*PF{}
	var order []string
	for _, nd := range devs {
		if nd.devPath == "" {
			continue
		}
		sriov := exists(filepath.Join(nd.devPath, "sriov_totalvfs")) || exists(filepath.Join(nd.devPath, "sriov_numvfs"))
		uplink := nd.port != nil && nd.port.Kind == PortUplink
		if !(uplink || (sriov && nd.port == nil)) {
			continue
		}
		if prev, ok := byDev[nd.devPath]; ok {
			// Several candidate netdevs on one device (netdevsim with
			// several ports): prefer an uplink, then the lowest port.
			if !uplink || (prev.Uplink != nil && prev.Uplink.Port.PF <= nd.port.PF) {
				continue
			}
		} else {
			order = append(order, nd.devPath)
		}
		pf := &PF{Netdev: nd.name, Bus: nd.bus, Device: nd.devName, SwitchID: nd.switchID, PortName: nd.portName, TotalVFs: -1, Number: -1}
		if uplink {
			pf.Uplink = &Representor{Netdev: nd.name, Port: *nd.port}
		}
		byDev[nd.devPath] = pf
	}

	for _, devPath := range order {
		pf := byDev[devPath]
		if err := d.fillPF(ctx, pf, devPath); err != nil {
			node.Problems = append(node.Problems, err)
			delete(byDev, devPath)
			continue
		}
	}
	var pfs []*PF
	for _, devPath := range order {
		if pf, ok := byDev[devPath]; ok {
			pfs = append(pfs, pf)
		}
	}

	// Representors: netdevs with a switch id and a non-uplink port name,
	// matched to the PF with the same switch id (and, where several PFs
	// share one, the same PF number).
	for _, nd := range devs {
		if nd.port == nil || nd.port.Kind == PortUplink || nd.switchID == "" {
			continue
		}
		var cands []*PF
		for _, pf := range pfs {
			if pf.SwitchID == nd.switchID {
				cands = append(cands, pf)
			}
		}
		var owner *PF
		switch {
		case len(cands) == 1:
			owner = cands[0]
		case len(cands) > 1:
			for _, pf := range cands {
				if pf.Number == nd.port.PF {
					owner = pf
				}
			}
		}
		if owner == nil {
			node.Problems = append(node.Problems, pathErr(filepath.Join(nd.dir, "phys_switch_id"),
				fmt.Sprintf("representor %s (%s) belongs to no PF with switch id %s and pf number %d", nd.name, nd.portName, nd.switchID, nd.port.PF), nil))
			continue
		}
		owner.Representors = append(owner.Representors, Representor{Netdev: nd.name, Port: *nd.port})
	}

	for _, pf := range pfs {
		slices.SortFunc(pf.Representors, func(a, b Representor) int {
			return cmp.Or(cmp.Compare(a.Port.Kind, b.Port.Kind), cmp.Compare(a.Port.Controller, b.Port.Controller),
				cmp.Compare(a.Port.PF, b.Port.PF), cmp.Compare(a.Port.VF, b.Port.VF), cmp.Compare(a.Port.SF, b.Port.SF),
				cmp.Compare(a.Netdev, b.Netdev))
		})
		for i := range pf.VFs {
			if r, err := pf.RepresentorForVF(pf.VFs[i].Index); err == nil {
				pf.VFs[i].Representor = r.Netdev
			}
		}
		node.PFs = append(node.PFs, *pf)
	}
	node.Kind = NodeNone
	for _, pf := range node.PFs {
		if pf.Mode == ModeSwitchdev && node.Kind == NodeNone {
			node.Kind = NodeEswitch
		}
		for _, r := range pf.Representors {
			if r.Port.External {
				node.Kind = NodeDPU
			}
		}
	}
	for _, p := range node.Problems {
		d.log.Warn("eswitch discovery problem", "err", p)
	}
	d.log.Debug("eswitch discovery", "kind", node.Kind, "pfs", len(node.PFs), "problems", len(node.Problems))
	return node, nil
}

func (d *Discoverer) readNetdev(name string) (*netdev, error) {
	dir := filepath.Join(d.sys, "class", "net", name)
	nd := &netdev{name: name, dir: dir}
	if _, err := resolve(dir); err != nil {
		return nil, err
	}
	var err error
	if _, ok, lerr := linkBase(filepath.Join(dir, "device")); lerr != nil {
		return nil, lerr
	} else if ok {
		if nd.devPath, err = resolve(filepath.Join(dir, "device")); err != nil {
			return nil, err
		}
		nd.devName = filepath.Base(nd.devPath)
		bus, ok, err := linkBase(filepath.Join(nd.devPath, "subsystem"))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, pathErr(filepath.Join(nd.devPath, "subsystem"), "device of "+name+" has no subsystem link", nil)
		}
		nd.bus = bus
	}
	if nd.switchID, _, err = readAttr(filepath.Join(dir, "phys_switch_id")); err != nil {
		return nil, err
	}
	pn, ok, err := readAttr(filepath.Join(dir, "phys_port_name"))
	if err != nil {
		return nil, err
	}
	if ok && pn != "" {
		p, err := ParsePortName(pn)
		if err != nil {
			if nd.switchID == "" {
				// Not a switch port: a driver's free-form port name
				// (some NICs name their ports) means nothing here.
				return nd, nil
			}
			return nil, pathErr(filepath.Join(dir, "phys_port_name"), "netdev "+name+" is a switch port", err)
		}
		nd.portName, nd.port = pn, &p
	}
	return nd, nil
}

// fillPF reads the PF's SR-IOV attributes, VFs and eswitch mode.
func (d *Discoverer) fillPF(ctx context.Context, pf *PF, devPath string) error {
	if pf.Bus == "pci" {
		fn, err := pciFunction(pf.Device)
		if err != nil {
			return pathErr(devPath, "PF device name is not a PCI address", err)
		}
		pf.Number = fn
	} else {
		// A non-PCI device (netdevsim) is its own only PF: its VF ports
		// are pf0vfN whatever its uplink port is called (netdevsim: p1).
		pf.Number = 0
	}
	var err error
	if n, ok, err := readInt(filepath.Join(devPath, "sriov_numvfs")); err != nil {
		return err
	} else if ok {
		pf.NumVFs = n
	}
	if n, ok, err := readInt(filepath.Join(devPath, "sriov_totalvfs")); err != nil {
		return err
	} else if ok {
		pf.TotalVFs = n
	}
	if pf.VFs, err = readVFs(devPath); err != nil {
		return err
	}
	mode, err := d.dl.EswitchMode(ctx, pf.DevlinkHandle())
	switch {
	case err == nil:
		pf.Mode = mode
	case errors.Is(err, ErrNoEswitch):
		pf.Mode = ModeNone
	default:
		return fmt.Errorf("pf %s: %w", pf.Netdev, err)
	}
	return nil
}

// readVFs reads the virtfnN links of a PF device.
func readVFs(devPath string) ([]VF, error) {
	ents, err := os.ReadDir(devPath)
	if err != nil {
		return nil, pathErr(devPath, "cannot list PF device", err)
	}
	var vfs []VF
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "virtfn")
		if !ok {
			continue
		}
		idx, err := strconv.Atoi(rest)
		if err != nil || idx < 0 {
			continue
		}
		link := filepath.Join(devPath, e.Name())
		vfDir, err := resolve(link)
		if err != nil {
			return nil, err
		}
		vf := VF{Index: idx, PCIAddress: filepath.Base(vfDir)}
		if drv, ok, err := linkBase(filepath.Join(vfDir, "driver")); err != nil {
			return nil, err
		} else if ok {
			vf.Driver = drv
		}
		nets, err := os.ReadDir(filepath.Join(vfDir, "net"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, pathErr(filepath.Join(vfDir, "net"), "cannot list VF netdevs", err)
		}
		if len(nets) > 0 {
			vf.Netdev = nets[0].Name()
		}
		vfs = append(vfs, vf)
	}
	slices.SortFunc(vfs, func(a, b VF) int { return cmp.Compare(a.Index, b.Index) })
	return vfs, nil
}

// pciFunction returns the function number of a PCI address
// (domain:bus:device.function).
func pciFunction(addr string) (int, error) {
	i := strings.LastIndexByte(addr, '.')
	if i < 0 || strings.Count(addr, ":") != 2 {
		return 0, fmt.Errorf("%q is not domain:bus:device.function", addr)
	}
	fn, err := strconv.ParseUint(addr[i+1:], 16, 8)
	if err != nil || fn > 7 {
		return 0, fmt.Errorf("%q: bad function number", addr)
	}
	return int(fn), nil
}
