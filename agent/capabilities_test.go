package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// newTree is an empty sysfs tree with a virtual lo (no device/, never a
// PF).
func newTree(t *testing.T) *sysfstest.Tree {
	tr := sysfstest.New(t)
	tr.Virtual("lo")
	return tr
}

// devlink is the devlink of a kernel fake's host namespace holding the
// devices of modes ("bus/device" to an eswitch mode: testkit.Devlink);
// a device not there has no eswitch.
func devlink(t *testing.T, modes map[string]string) eswitch.Devlink {
	k, _ := testkit.Devlink(t, modes)
	return eswitch.NetlinkDevlink{Kernel: k}
}

const switchA = "b8cef6030012a4b0"

// hostSwitchdev: PF ens1f0np0 (0000:03:00.0) in switchdev mode with 3 VFs:
// VF 0 on mlx5_core (netdev ens1f0v0), VF 1 on vfio-pci (no netdev), VF 2
// unbound; representors created in reverse name order. PF ens1f1np1
// (0000:03:00.1) in legacy mode without VFs.
func hostSwitchdev(t *testing.T) (*sysfstest.Tree, eswitch.Devlink, string) {
	tr := newTree(t)
	drivers := []string{"mlx5_core", "vfio-pci", ""}
	pf0 := tr.PF("0000:03:00.0", 8, 3, "03", "", func(int) string { return "" })
	for i, drv := range drivers {
		vf := fmt.Sprintf("%s/0000:03:00.%d", sysfstest.PCIParent, i+2)
		if drv != "" {
			tr.Mkdir("bus/pci/drivers/" + drv)
			tr.RelLink(vf+"/driver", "bus/pci/drivers/"+drv)
		}
		if drv == "mlx5_core" {
			tr.Netdev(vf, fmt.Sprintf("ens1f0v%d", i), "", "")
		}
	}
	tr.Netdev(pf0, "ens1f0np0", switchA, "p0")
	for i := range 3 {
		tr.Netdev(pf0, fmt.Sprintf("eth%d", 2-i), switchA, fmt.Sprintf("pf0vf%d", i))
	}
	pf1 := tr.PCIDev("0000:03:00.1", "mlx5_core")
	tr.Write(pf1+"/sriov_totalvfs", "8")
	tr.Write(pf1+"/sriov_numvfs", "0")
	tr.Netdev(pf1, "ens1f1np1", switchA, "p1")
	return tr, devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev", "pci/0000:03:00.1": "legacy"}), pf0
}

func discover(t *testing.T, tr *sysfstest.Tree, dl eswitch.Devlink) *skiffv1.NodeCapabilities {
	t.Helper()
	d := eswitch.New(eswitch.Options{SysRoot: tr.Root, Devlink: dl})
	n, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Problems) > 0 {
		t.Fatalf("problems: %v", n.Problems)
	}
	return Capabilities(n, "6.12.0-test")
}

func mustJSON(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCapabilitiesHostSwitchdev(t *testing.T) {
	tr, dl, _ := hostSwitchdev(t)
	got := discover(t, tr, dl)
	want := &skiffv1.NodeCapabilities{
		Role:   RoleHost,
		Modes:  []string{"software", "offload"},
		Kernel: "6.12.0-test",
		Pfs: []*skiffv1.PhysicalFunction{
			{Name: "ens1f0np0", PciAddress: "0000:03:00.0", EswitchMode: "switchdev", NumVfs: 3, TotalVfs: 8,
				UplinkRepresentor: "ens1f0np0", SwitchId: switchA, Vfs: []*skiffv1.VirtualFunction{
					{Index: 0, PciAddress: "0000:03:00.2", Netdev: "ens1f0v0", Representor: "eth2", Driver: "mlx5_core"},
					{Index: 1, PciAddress: "0000:03:00.3", Representor: "eth1", Driver: "vfio-pci"},
					{Index: 2, PciAddress: "0000:03:00.4", Representor: "eth0"},
				}},
			{Name: "ens1f1np1", PciAddress: "0000:03:00.1", EswitchMode: "legacy", TotalVfs: 8,
				UplinkRepresentor: "ens1f1np1", SwitchId: switchA},
		},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("capabilities:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
	// Discovery is deterministic: the same node gives equal capabilities,
	// so registering again is a no-op for the controller.
	if again := discover(t, tr, dl); !proto.Equal(got, again) {
		t.Fatalf("second discovery differs:\n%s\n%s", mustJSON(t, got), mustJSON(t, again))
	}
	// lowerCamelCase JSON names, as skiffctl and the VM test read them.
	js := mustJSON(t, got)
	for _, k := range []string{`"eswitchMode":"switchdev"`, `"numVfs":3`, `"totalVfs":8`, `"uplinkRepresentor":"ens1f0np0"`, `"pciAddress":"0000:03:00.2"`, `"switchId"`} {
		if !strings.Contains(strings.ReplaceAll(js, " ", ""), k) {
			t.Errorf("JSON lacks %s: %s", k, js)
		}
	}
}

func TestCapabilitiesLegacyNoTotal(t *testing.T) {
	tr := newTree(t)
	// A legacy-mode NIC with 2 VFs on iavf and no eswitch devlink knows;
	// sriov_totalvfs missing (TotalVFs -1 in eswitch) reports 0.
	dev := tr.PCIDev("0000:5e:00.0", "ice")
	tr.Write(dev+"/sriov_numvfs", "2")
	for i := range 2 {
		vf := tr.PCIDev(fmt.Sprintf("0000:5e:01.%d", i), "iavf")
		tr.RelLink(vf+"/physfn", dev)
		tr.RelLink(fmt.Sprintf("%s/virtfn%d", dev, i), vf)
		tr.Netdev(vf, fmt.Sprintf("ens2f0v%d", i), "", "")
	}
	tr.Netdev(dev, "ens2f0", "", "")
	got := discover(t, tr, devlink(t, nil))
	want := &skiffv1.NodeCapabilities{Role: RoleNone, Modes: []string{"software"}, Kernel: "6.12.0-test",
		Pfs: []*skiffv1.PhysicalFunction{{Name: "ens2f0", PciAddress: "0000:5e:00.0", NumVfs: 2, Vfs: []*skiffv1.VirtualFunction{
			{Index: 0, PciAddress: "0000:5e:01.0", Netdev: "ens2f0v0", Driver: "iavf"},
			{Index: 1, PciAddress: "0000:5e:01.1", Netdev: "ens2f0v1", Driver: "iavf"},
		}}}}
	if !proto.Equal(got, want) {
		t.Fatalf("capabilities:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
}

func TestCapabilitiesDPU(t *testing.T) {
	tr := newTree(t)
	dev := tr.PCIDev("0000:03:00.0", "mlx5_core")
	tr.Write(dev+"/sriov_totalvfs", "0")
	tr.Write(dev+"/sriov_numvfs", "0")
	tr.Netdev(dev, "p0", switchA, "p0")
	tr.Netdev(dev, "pf0hpf", switchA, "pf0hpf")
	tr.Netdev(dev, "pf0vf0", switchA, "c1pf0vf0")
	tr.Virtual("tmfifo_net0")
	got := discover(t, tr, devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev"}))
	want := &skiffv1.NodeCapabilities{Role: RoleDPU, Modes: []string{"software", "offload", "dpu"}, Kernel: "6.12.0-test",
		Pfs: []*skiffv1.PhysicalFunction{{Name: "p0", PciAddress: "0000:03:00.0", EswitchMode: "switchdev", UplinkRepresentor: "p0", SwitchId: switchA}}}
	if !proto.Equal(got, want) {
		t.Fatalf("capabilities:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
}

// TestCapabilitiesRepresentorOnlyVFs: VFs that are not PCI functions
// (netdevsim) are known only by their representors; they are reported by
// index, sorted, with the representor and nothing else. External (DPU
// host) VF representors are not this node's VFs.
func TestCapabilitiesRepresentorOnlyVFs(t *testing.T) {
	tr := newTree(t)
	dev := "devices/netdevsim10"
	tr.Mkdir(dev)
	tr.RelLink(dev+"/subsystem", "bus/netdevsim")
	tr.RelLink("bus/netdevsim/devices/netdevsim10", dev)
	tr.Write(dev+"/sriov_numvfs", "3")
	tr.Netdev(dev, "eth0", switchA, "p0")
	tr.Netdev(dev, "eth1", switchA, "pf0vf2")
	tr.Netdev(dev, "eth2", switchA, "pf0vf0")
	tr.Netdev(dev, "eth3", switchA, "pf0vf1")
	got := discover(t, tr, devlink(t, map[string]string{"netdevsim/netdevsim10": "switchdev"}))
	want := &skiffv1.NodeCapabilities{Role: RoleHost, Modes: []string{"software", "offload"}, Kernel: "6.12.0-test",
		Pfs: []*skiffv1.PhysicalFunction{{Name: "eth0", EswitchMode: "switchdev", NumVfs: 3, UplinkRepresentor: "eth0", SwitchId: switchA,
			Vfs: []*skiffv1.VirtualFunction{{Index: 0, Representor: "eth2"}, {Index: 1, Representor: "eth3"}, {Index: 2, Representor: "eth1"}}}}}
	if !proto.Equal(got, want) {
		t.Fatalf("capabilities:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
}

func TestCapabilitiesNilAndBrokenSysfs(t *testing.T) {
	if got := Capabilities(nil, "k"); got.Role != RoleNone || !slices.Equal(got.Modes, []string{"software"}) || len(got.Pfs) != 0 || got.Kernel != "k" {
		t.Fatalf("nil node: %v", got)
	}
	// No class/net at all: discovery fails, which is logged, not fatal.
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	d := eswitch.New(eswitch.Options{SysRoot: filepath.Join(t.TempDir(), "nosys"), Devlink: devlink(t, nil)})
	got := DiscoverCapabilities(context.Background(), d, log)
	if got.Role != RoleNone || !slices.Equal(got.Modes, []string{"software"}) {
		t.Fatalf("broken sysfs: %v", got)
	}
	if got.Kernel == "" {
		t.Error("kernel release missing")
	}
	if !strings.Contains(logs.String(), "eswitch discovery failed") {
		t.Errorf("failure not logged: %q", logs.String())
	}
}

func TestChooseMode(t *testing.T) {
	software := &skiffv1.NodeCapabilities{Role: RoleNone, Modes: []string{"software"},
		Pfs: []*skiffv1.PhysicalFunction{{Name: "ens2f0", EswitchMode: "legacy"}}}
	offload := &skiffv1.NodeCapabilities{Role: RoleHost, Modes: []string{"software", "offload"}}
	dpu := &skiffv1.NodeCapabilities{Role: RoleDPU, Modes: []string{"software", "offload", "dpu"}}
	for _, tc := range []struct {
		flag    string
		caps    *skiffv1.NodeCapabilities
		want    string
		wantErr []string
	}{
		{flag: "software", caps: software, want: "software"},
		{flag: "software", caps: offload, want: "software"},
		{flag: "auto", caps: software, want: "software"},
		{flag: "", caps: software, want: "software"},
		{flag: "auto", caps: offload, want: "offload"},
		{flag: "auto", caps: dpu, want: "dpu"},
		{flag: "", caps: dpu, want: "dpu"},
		{flag: "offload", caps: dpu, want: "offload"},
		{flag: "auto", caps: nil, want: "software"},
		{flag: "offload", caps: offload, want: "offload"},
		{flag: "offload", caps: software, wantErr: []string{"--mode offload", "no eswitch in switchdev mode", "ens2f0: legacy"}},
		{flag: "offload", caps: &skiffv1.NodeCapabilities{Modes: []string{"software"}}, wantErr: []string{"--mode offload", "no SR-IOV PF found"}},
		{flag: "dpu", caps: dpu, want: "dpu"},
		{flag: "dpu-host", caps: software, want: "dpu-host"},
		{flag: "bluefield", caps: dpu, wantErr: []string{`--mode: "bluefield" is not auto, software, offload, dpu or dpu-host`}},
		{flag: "Software", caps: software, wantErr: []string{"--mode"}},
	} {
		t.Run(tc.flag+"/"+strings.Join(tc.caps.GetModes(), "+"), func(t *testing.T) {
			got, err := ChooseMode(tc.flag, tc.caps)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("mode %q, want error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// fakeRegistrar records Register calls.
type fakeRegistrar struct {
	skiffv1.AgentServiceClient
	mu    sync.Mutex
	nodes []*skiffv1.Node
}

func (f *fakeRegistrar) Register(_ context.Context, r *skiffv1.RegisterRequest, _ ...grpc.CallOption) (*skiffv1.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = append(f.nodes, proto.Clone(r.Node).(*skiffv1.Node))
	return &skiffv1.RegisterResponse{Node: r.Node}, nil
}

func (f *fakeRegistrar) registered() []*skiffv1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nodes)
}

// TestRediscoverReregistersOnlyOnChange: link events about NIC netdevs
// lead, debounced, to one discovery; the node is registered again only
// when the capabilities changed.
func TestRediscoverReregistersOnlyOnChange(t *testing.T) {
	tr, dl, pf0 := hostSwitchdev(t)
	reg := &fakeRegistrar{}
	d := eswitch.New(eswitch.Options{SysRoot: tr.Root, Devlink: dl})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := &Agent{cfg: Config{Node: "n1", SysRoot: tr.Root, Rediscover: 50 * time.Millisecond, Mode: "auto"}, log: log,
		client: reg, mode: ModeSoftware, rediscover: make(chan struct{}, 1),
		discover: func(ctx context.Context) *skiffv1.NodeCapabilities { return DiscoverCapabilities(ctx, d, log) }}
	a.caps = DiscoverCapabilities(context.Background(), d, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.rediscoverLoop(ctx) }()
	defer func() { cancel(); <-done }()

	if !hasDevice(tr.Root, "eth0") || hasDevice(tr.Root, "lo") || hasDevice(tr.Root, "nosuch") {
		t.Fatal("hasDevice: eth0 has a device, lo and nosuch do not")
	}
	if !a.namedInCaps("eth1") || !a.namedInCaps("ens1f0v0") || a.namedInCaps("lo") {
		t.Fatal("namedInCaps")
	}

	// Nothing changed: a burst of events, no registration.
	for range 5 {
		a.rediscoverSoon()
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(reg.registered()); n != 0 {
		t.Fatalf("%d registrations without a change", n)
	}

	// VF 2's representor goes away: one registration with it missing.
	tr.Remove(pf0, "eth0")
	a.rediscoverSoon()
	deadline := time.Now().Add(5 * time.Second)
	for len(reg.registered()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	got := reg.registered()
	if len(got) != 1 {
		t.Fatalf("%d registrations after one change, want 1", len(got))
	}
	n := got[0]
	if n.Name != "n1" || n.Mode != "software" {
		t.Errorf("node %v", n)
	}
	vfs := n.GetCapabilities().GetPfs()[0].GetVfs()
	if len(vfs) != 3 || vfs[2].Representor != "" || vfs[1].Representor != "eth1" {
		t.Fatalf("VFs after representor removal: %v", vfs)
	}
	if !proto.Equal(a.nodeObject(), n) {
		t.Errorf("nodeObject differs from what was registered")
	}
}

// TestHeldVFKeepsCapabilities: a VF an endpoint holds leaves discovery
// (its netdev moved into a pod) without changing the capabilities the
// node registers; the same VF leaving while no endpoint holds it is a
// change.
func TestHeldVFKeepsCapabilities(t *testing.T) {
	tr, dl, _ := hostSwitchdev(t)
	d := eswitch.New(eswitch.Options{SysRoot: tr.Root, Devlink: dl})
	log := slog.New(slog.DiscardHandler)
	before := DiscoverCapabilities(context.Background(), d, log)
	vf0 := fmt.Sprintf("%s/0000:03:00.2", sysfstest.PCIParent)
	tr.Remove(vf0, "ens1f0v0") // the pod's namespace has it now
	after := DiscoverCapabilities(context.Background(), d, log)
	if proto.Equal(before, after) {
		t.Fatal("discovery did not notice VF 0's netdev leaving: the test shows nothing")
	}
	for _, tc := range []struct {
		name     string
		pf       string // the endpoint's PF: netdev or PCI address
		vf       int
		wantSame bool
	}{
		{"held, PF by netdev", "ens1f0np0", 0, true},
		{"held, PF by PCI address", "0000:03:00.0", 0, true},
		{"another VF held", "ens1f0np0", 1, false},
		{"another PF's VF 0 held", "ens1f1np1", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{plan: plan.Plan{Local: map[string]plan.Endpoint{"ep": {Name: "ep", Kind: plan.KindVF, PF: tc.pf, VFIndex: tc.vf}}}}
			caps := proto.Clone(after).(*skiffv1.NodeCapabilities)
			keepHeldVFs(before, caps, a.heldVF)
			if same := proto.Equal(before, caps); same != tc.wantSame {
				t.Errorf("capabilities unchanged = %v, want %v:\nbefore %v\nafter  %v", same, tc.wantSame, before, caps)
			}
		})
	}
	// A VF gone whole from discovery (a stand-in netdev was all there
	// was of it) comes back in its place.
	caps := proto.Clone(before).(*skiffv1.NodeCapabilities)
	caps.Pfs[0].Vfs = caps.Pfs[0].Vfs[1:]
	a := &Agent{plan: plan.Plan{Local: map[string]plan.Endpoint{"ep": {Name: "ep", Kind: plan.KindVF, PF: "ens1f0np0", VFIndex: 0}}}}
	keepHeldVFs(before, caps, a.heldVF)
	if !proto.Equal(before, caps) {
		t.Errorf("a held VF missing from discovery was not kept:\nbefore %v\nafter  %v", before, caps)
	}
}
