package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/skiff-sdn/skiff/deviceplugin/kubelettest"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
)

const wait = 10 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runPlugin runs the plugin against a fixture and a stand-in kubelet
// until the returned stop is called (or the test ends); stop waits for
// Run to return and gives its error.
func runPlugin(t *testing.T, f *fixture, k *kubelettest.Kubelet, conf, devInfo string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c, err := ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- Run(ctx, Options{Pools: c, SysRoot: f.tr.Root, DevRoot: f.dev, Devlink: f.dl, PluginDir: k.Dir, KubeletSocket: k.Socket,
			DevInfoDir: devInfo, Rescan: 20 * time.Millisecond, SocketCheck: 20 * time.Millisecond, GoneHold: 200 * time.Millisecond, Logger: testLogger(t)})
	}()
	stopped := false
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(wait):
				t.Fatal("Run did not return after its context ended")
			}
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func listIs(want string) func([]*pluginapi.Device) bool {
	return func(l []*pluginapi.Device) bool { return kubelettest.Summary(l) == want }
}

// addVF adds VF i to PF 0000:03:00.0 of the fixture, with its netdev and
// representor, as raising sriov_numvfs does.
func addVF(f *fixture, i int) {
	addr := vfAddr("03", i)
	vf := f.tr.PCIDev(addr, "mlx5_core")
	pf := sysfstest.PCIParent + "/0000:03:00.0"
	f.tr.RelLink(vf+"/physfn", pf)
	f.tr.RelLink(fmt.Sprintf("%s/virtfn%d", pf, i), vf)
	f.tr.Netdev(vf, fmt.Sprintf("ens1f0v%d", i), "", "")
	f.tr.Write(vf+"/vendor", "0x15b3")
	f.tr.Write(vf+"/device", "0x101e")
	f.tr.Write(vf+"/numa_node", "0")
	f.tr.Netdev(pf, fmt.Sprintf("03_rep%d", i), sysfstest.ConnectX6SwitchID[:14]+"03", fmt.Sprintf("pf0vf%d", i))
}

const protoConf = `
pools:
  - resourceName: skiff.io/vf
    requireSwitchdev: true
    selectors: {vendors: ["15b3"]}
`

// TestProtocol holds the whole conversation with a stand-in kubelet over
// real gRPC on unix sockets: registration, the device list following the
// hardware, preferred allocation, Allocate, re-registration after the
// kubelet restarts, and cleanup.
func TestProtocol(t *testing.T) {
	f := newFixture(t)
	f.connectX6("03", "ens1f0np0", 3, 0)
	k := kubelettest.Start(t, "")
	devInfo := filepath.Join(t.TempDir(), "devinfo", "dp")
	stop := runPlugin(t, f, k, protoConf, devInfo)

	p := k.WaitRegistration(wait)
	if r := p.Request; r.Version != "v1beta1" || r.ResourceName != "skiff.io/vf" || r.Endpoint != "skiff-skiff_io-vf.sock" ||
		r.Options == nil || !r.Options.GetPreferredAllocationAvailable {
		t.Errorf("registration = %+v", r)
	}
	if !p.Options.GetPreferredAllocationAvailable || p.Options.PreStartRequired {
		t.Errorf("options = %+v", p.Options)
	}
	fi, err := os.Stat(filepath.Join(k.Dir, p.Request.Endpoint))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("plugin socket: %v %v", fi.Mode(), err)
	}
	all3 := "0000:03:00.2=Healthy@0 0000:03:00.3=Healthy@0 0000:03:00.4=Healthy@0"
	p.WaitList(t, wait, "first list", listIs(all3))

	// The PF's link goes down and comes back.
	f.tr.Write("class/net/ens1f0np0/operstate", "down")
	p.WaitList(t, wait, "PF down", listIs("0000:03:00.2=Unhealthy@0 0000:03:00.3=Unhealthy@0 0000:03:00.4=Unhealthy@0"))
	f.tr.Write("class/net/ens1f0np0/operstate", "up")
	p.WaitList(t, wait, "PF up", listIs(all3))

	// A VF appears without a restart.
	addVF(f, 3)
	p.WaitList(t, wait, "VF 3 added", listIs(all3+" 0000:03:00.5=Healthy@0"))

	// A VF goes: unhealthy first (allocatable drops), then gone
	// (capacity drops).
	f.removeVF(t, "0000:03:00.0", "03", 1, "ens1f0v1")
	p.WaitList(t, wait, "VF 1 unhealthy", listIs("0000:03:00.2=Healthy@0 0000:03:00.3=Unhealthy@0 0000:03:00.4=Healthy@0 0000:03:00.5=Healthy@0"))
	p.WaitList(t, wait, "VF 1 dropped", listIs("0000:03:00.2=Healthy@0 0000:03:00.4=Healthy@0 0000:03:00.5=Healthy@0"))

	ctx := context.Background()
	pref, err := p.Client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"0000:03:00.5", "0000:03:00.4", "0000:03:00.2"}, MustIncludeDeviceIDs: []string{"0000:03:00.4"}, AllocationSize: 2},
	}})
	if err != nil || len(pref.ContainerResponses) != 1 || strings.Join(pref.ContainerResponses[0].DeviceIDs, " ") != "0000:03:00.4 0000:03:00.2" {
		t.Errorf("preferred = %v, %v", pref, err)
	}

	resp, err := p.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"0000:03:00.2", "0000:03:00.5"}}, {DevicesIds: []string{"0000:03:00.4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("allocate = %v", resp)
	}
	if env := resp.ContainerResponses[0].Envs; len(env) != 1 || env["PCIDEVICE_SKIFF_IO_VF"] != "0000:03:00.2,0000:03:00.5" {
		t.Errorf("container 0 env = %v", env)
	}
	if env := resp.ContainerResponses[1].Envs; env["PCIDEVICE_SKIFF_IO_VF"] != "0000:03:00.4" {
		t.Errorf("container 1 env = %v", env)
	}
	if len(resp.ContainerResponses[0].Devices) != 0 || len(resp.ContainerResponses[0].Mounts) != 0 {
		t.Errorf("netdev pool gave devices or mounts: %v", resp.ContainerResponses[0])
	}
	b, err := os.ReadFile(filepath.Join(devInfo, "skiff.io-vf-0000:03:00.5-device.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.5","pf-pci-address":"0000:03:00.0","representor-device":"03_rep3"}}` + "\n"
	if string(b) != want {
		t.Errorf("device-info file:\n%s\nwant\n%s", b, want)
	}
	// Root's only, in a directory made root's only.
	for p, want := range map[string]os.FileMode{filepath.Join(devInfo, "skiff.io-vf-0000:03:00.5-device.json"): 0o600, devInfo: os.ModeDir | 0o700} {
		if fi, err := os.Stat(p); err != nil {
			t.Error(err)
		} else if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	// A request naming a device the pool lacks is refused whole: no file
	// is written for the good device of it either.
	good := DevInfoPath(devInfo, "skiff.io/vf", "0000:03:00.4")
	if err := os.Remove(good); err != nil {
		t.Fatal(err)
	}
	_, err = p.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"0000:03:00.4"}}, {DevicesIds: []string{"0000:99:00.1"}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `container request 1: skiff.io/vf has no device "0000:99:00.1"`) {
		t.Errorf("unknown device: %v", err)
	}
	if _, err := os.Stat(good); err == nil {
		t.Error("device-info file written for a refused request")
	}
	// A gone VF is refused too (it is still listed, unhealthy, for a
	// while: the kubelet could race).
	_, err = p.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:03:00.3"}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("dropped device: %v", err)
	}

	// The kubelet restarts: it wipes the directory's sockets and serves a
	// new kubelet.sock. The plugin serves again and re-registers.
	k.Restart()
	if !p.Ended(wait) {
		t.Error("the old ListAndWatch did not end")
	}
	p2 := k.WaitRegistration(wait)
	if p2.Request.ResourceName != "skiff.io/vf" {
		t.Errorf("re-registration = %+v", p2.Request)
	}
	p2.WaitList(t, wait, "list after kubelet restart", listIs("0000:03:00.2=Healthy@0 0000:03:00.4=Healthy@0 0000:03:00.5=Healthy@0"))

	// Only the kubelet socket is replaced (the plugin's stays): the
	// plugin registers again with the new kubelet.
	k.Reopen()
	p3 := k.WaitRegistration(wait)
	p3.WaitList(t, wait, "list after kubelet socket replaced", listIs("0000:03:00.2=Healthy@0 0000:03:00.4=Healthy@0 0000:03:00.5=Healthy@0"))

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !p3.Ended(wait) {
		t.Error("ListAndWatch did not end when the plugin stopped")
	}
	if _, err := os.Stat(filepath.Join(k.Dir, p3.Request.Endpoint)); err == nil {
		t.Error("plugin socket left behind")
	}
	if ents, _ := os.ReadDir(devInfo); len(ents) != 0 {
		t.Errorf("device-info files left behind: %v", ents)
	}
	if extra := k.Registrations(); len(extra) != 0 {
		t.Errorf("%d registrations more than expected", len(extra))
	}
}

// TestRestartKeepsHeldVFs: a VF whose netdev went into a pod is advertised
// under the same ID and healthy after the plugin restarts, so the kubelet
// (whose checkpoint has the allocation) still counts it as the pod's and
// never as free; nothing the plugin does at start touches the VF.
func TestRestartKeepsHeldVFs(t *testing.T) {
	f := newFixture(t)
	f.connectX6("03", "ens1f0np0", 2, 0)
	k := kubelettest.Start(t, "")
	devInfo := filepath.Join(t.TempDir(), "dp")
	stop := runPlugin(t, f, k, protoConf, devInfo)
	p := k.WaitRegistration(wait)
	both := "0000:03:00.2=Healthy@0 0000:03:00.3=Healthy@0"
	p.WaitList(t, wait, "first list", listIs(both))
	if _, err := p.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:03:00.3"}}}}); err != nil {
		t.Fatal(err)
	}
	// The CNI moves VF 1's netdev into the pod; the plugin stops.
	f.moveIntoPod(t, "03", 1, "ens1f0v1")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	before := snapshotTree(t, f.tr.Root)
	runPlugin(t, f, k, protoConf, devInfo)
	p2 := k.WaitRegistration(wait)
	p2.WaitList(t, wait, "list after plugin restart", listIs(both))
	if after := snapshotTree(t, f.tr.Root); after != before {
		t.Errorf("the plugin changed the sysfs tree at start:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshotTree lists a tree's paths and file contents.
func snapshotTree(t *testing.T, root string) string {
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", strings.TrimPrefix(p, root), fi.Mode())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestVFIOAllocate: a vfio pool hands out /dev/vfio/vfio and the VF's
// group node.
func TestVFIOAllocate(t *testing.T) {
	f := newFixture(t)
	f.legacyE810()
	k := kubelettest.Start(t, "")
	devInfo := filepath.Join(t.TempDir(), "dp")
	runPlugin(t, f, k, `{pools: [{resourceName: skiff.io/vfio, use: vfio, selectors: {drivers: [vfio-pci]}}]}`, devInfo)
	p := k.WaitRegistration(wait)
	p.WaitList(t, wait, "first list", listIs("0000:5e:00.4=Healthy@1"))
	resp, err := p.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:5e:00.4"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	var specs []string
	for _, d := range cr.Devices {
		specs = append(specs, d.ContainerPath+"="+d.HostPath+":"+d.Permissions)
	}
	if got := strings.Join(specs, " "); got != "/dev/vfio/vfio=/dev/vfio/vfio:rw /dev/vfio/42=/dev/vfio/42:rw" {
		t.Errorf("device specs = %s", got)
	}
	if cr.Envs["PCIDEVICE_SKIFF_IO_VFIO"] != "0000:5e:00.4" {
		t.Errorf("env = %v", cr.Envs)
	}
	di, err := ReadDevInfo(DevInfoPath(devInfo, "skiff.io/vfio", "0000:5e:00.4"))
	if err != nil || di.Type != "pci" || di.PCI.PCIAddress != "0000:5e:00.4" || di.PCI.PFPCIAddress != "0000:5e:00.0" || di.PCI.RepresentorDevice != "" {
		t.Errorf("device-info = %+v %v", di, err)
	}
}

// TestNoKubeletYet: the plugin serves and keeps trying until a kubelet
// appears.
func TestNoKubeletYet(t *testing.T) {
	f := newFixture(t)
	f.connectX6("03", "ens1f0np0", 1, 0)
	k := kubelettest.Start(t, "")
	k.Stop()
	_ = os.Remove(k.Socket)
	runPlugin(t, f, k, protoConf, filepath.Join(t.TempDir(), "dp"))
	time.Sleep(100 * time.Millisecond)
	if got := k.Registrations(); len(got) != 0 {
		t.Fatalf("registered with no kubelet: %v", got)
	}
	k.Restart()
	k.WaitRegistration(wait).WaitList(t, wait, "first list", listIs("0000:03:00.2=Healthy@0"))
}
