package deviceplugin_test

// The device plugin in the kernel VM, against a real eswitch.
//
// What is real: a netdevsim PF in switchdev mode with 4 VFs, their
// representors, its eswitch mode (read through devlink: the plugin uses
// the kernel's devlink here, not a fake), its link state (operstate), the
// netlink link events that make the plugin rescan at once, network
// namespaces, and the VF move into a pod (offload/vf's Mover) with the
// namespace-tagged sysfs that hides a moved netdev from the host.
//
// What is stood in (package vftest): the VFs' netdevs (ports of one-port
// netdevsim devices) and their PCI functions (directories of a sysfs
// overlay tree whose net/ links into the real /sys). The kubelet is the
// stand-in of package kubelettest (the real one is in the real-cluster
// tests).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/skiff-sdn/skiff/deviceplugin"
	"github.com/skiff-sdn/skiff/deviceplugin/kubelettest"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/offload/vf/vftest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

func vmLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func allHealth(ids []string, h string) string {
	var out []string
	for _, id := range ids {
		out = append(out, id+"="+h)
	}
	return strings.Join(out, " ")
}

func is(want string) func([]*pluginapi.Device) bool {
	return func(l []*pluginapi.Device) bool { return kubelettest.Summary(l) == want }
}

// linkPeer links a netdevsim port to the port of a new netdevsim device
// (netdevsim's link_device), which gives both carrier.
func linkPeer(t *testing.T, port string) {
	t.Helper()
	peer := guest.NewNetdevsim(t, 59, 1).Netdevs(t)[0]
	guest.Run(t, guest.IP, "link", "set", peer, "up")
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	idx := func(n string) string {
		b, err := os.ReadFile("/sys/class/net/" + n + "/ifindex")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	arg := fmt.Sprintf("%d:%s %d:%s", ns.Fd(), idx(port), ns.Fd(), idx(peer))
	if err := os.WriteFile("/sys/bus/netdevsim/link_device", []byte(arg), 0); err != nil {
		t.Fatalf("netdevsim link_device %q: %v", arg, err)
	}
	testkit.Eventually(t, port+" carrier", 10*time.Second, func() (bool, string) {
		b, _ := os.ReadFile("/sys/class/net/" + port + "/operstate")
		return strings.TrimSpace(string(b)) == "up", string(b)
	})
}

func TestPluginOnNetdevsim(t *testing.T) {
	guest.Require(t)
	log := vmLogger()
	s := vftest.New(t, 52, 4, 71, "skdpvf", log)
	var ids []string
	for _, r := range s.Refs {
		ids = append(ids, r.PCI)
	}
	cfg, err := deviceplugin.ParseConfig([]byte(`{pools: [{resourceName: skiff.io/vf, requireSwitchdev: true, selectors: {vendors: ["15b3"], pfNames: [` + s.PF + `]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	k := kubelettest.Start(t, "")
	devInfo := filepath.Join(t.TempDir(), "dp")
	// The stand-in's sysfs tree follows the kernel's representors only
	// when the test links them (LinkRepresentors), after the kernel's
	// link events: a rescan on those events may still see the old tree.
	// Once the tree matches, the test sends the hint the events carried
	// (on a real NIC the representor's sysfs entry exists before its
	// link event).
	standIn := make(chan struct{}, 1)
	linked := func() {
		s.LinkRepresentors(t)
		select {
		case standIn <- struct{}{}:
		default:
		}
	}
	run := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		events, kernel := make(chan struct{}, 1), deviceplugin.LinkHints(ctx, log)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-kernel:
				case <-standIn:
				}
				select {
				case events <- struct{}{}:
				default:
				}
			}
		}()
		go func() {
			// A long rescan: the changes below must be seen through the
			// netlink link events, or the one-second socket check.
			done <- deviceplugin.Run(ctx, deviceplugin.Options{Pools: cfg, SysRoot: s.Root, DevRoot: t.TempDir(), PluginDir: k.Dir, KubeletSocket: k.Socket,
				DevInfoDir: devInfo, Rescan: time.Hour, LinkEvents: events, Logger: log})
		}()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	stop := run()
	p := k.WaitRegistration(30 * time.Second)
	const within = 30 * time.Second
	healthy := allHealth(ids, "Healthy")
	p.WaitList(t, within, "first list", is(healthy))

	// The PF's link goes down: the link event makes the plugin rescan.
	guest.Run(t, guest.IP, "link", "set", s.PF, "down")
	p.WaitList(t, within, "PF down", is(allHealth(ids, "Unhealthy")))
	guest.Run(t, guest.IP, "link", "set", s.PF, "up")
	// Up again, the netdevsim port has no carrier until it has a peer
	// (as a NIC port without a cable): the plugin keeps it unhealthy.
	// Linking it to another netdevsim port is plugging the cable in.
	linkPeer(t, s.PF)
	p.WaitList(t, within, "PF up", is(healthy))

	// The eswitch goes back to legacy (the representors go with it).
	guest.Run(t, "/usr/sbin/devlink", "dev", "eswitch", "set", "netdevsim/netdevsim52", "mode", "legacy")
	linked()
	p.WaitList(t, within, "eswitch legacy", is(allHealth(ids, "Unhealthy")))
	guest.Run(t, "/usr/sbin/devlink", "dev", "eswitch", "set", "netdevsim/netdevsim52", "mode", "switchdev")
	linked()
	p.WaitList(t, within, "eswitch switchdev again", is(healthy))

	// The kubelet gives VF 1 to a pod; the CNI moves it in.
	resp, err := p.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{ids[1]}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs["PCIDEVICE_SKIFF_IO_VF"]; got != ids[1] {
		t.Errorf("env = %q", got)
	}
	di, err := deviceplugin.ReadDevInfo(deviceplugin.DevInfoPath(devInfo, "skiff.io/vf", ids[1]))
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := os.Readlink(filepath.Join(s.Root, "class/net", di.PCI.RepresentorDevice))
	if di.PCI.PCIAddress != ids[1] || rep == "" {
		t.Errorf("device-info = %+v (representor link %q)", di.PCI, rep)
	}
	guest.AddNetns(t, "skdppod")
	mover := vf.NewMover(vf.MoverOptions{SysRoot: s.Root, Host: testkit.Open(t, nl.Open, ""), Logger: log})
	mac := []byte{0x02, 0x5a, 0, 0, 0, 0x21}
	if err := mover.Attach(s.Refs[1], vf.PodSettings(mac), "/run/netns/skdppod", vf.PodIface{Name: "eth0", MAC: mac}); err != nil {
		t.Fatal(err)
	}
	// The moved VF is invisible in the host's sysfs and still healthy.
	got, _, err := deviceplugin.NewScanner(s.Root, "", nil).Scan(context.Background(), cfg.Pools)
	if err != nil {
		t.Fatal(err)
	}
	if d := got["skiff.io/vf"][1]; d.ID != ids[1] || d.Netdev != "" || !d.Healthy {
		t.Errorf("moved VF as scanned: %+v", d)
	}
	// The plugin restarts: the same IDs, all healthy, VF 1 among them.
	stop()
	if !p.Ended(within) {
		t.Error("ListAndWatch did not end with the plugin")
	}
	run()
	k.WaitRegistration(within).WaitList(t, within, "after plugin restart", is(healthy))

	if err := mover.Detach(s.Refs[1], "/run/netns/skdppod", "eth0"); err != nil {
		t.Fatal(err)
	}
}
