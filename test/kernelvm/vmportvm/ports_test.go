package vmportvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// vfLine is what iproute2 says of VF idx of PF pf in namespace ns.
func vfLine(t *testing.T, ns, pf string, idx int) string {
	out := guest.In(t, ns, ipBin, "link", "show", "dev", pf)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, fmt.Sprintf("vf %d ", idx)) {
			return strings.TrimSpace(l)
		}
	}
	t.Fatalf("no vf %d on %s:\n%s", idx, pf, out)
	return ""
}

// TestVMPortsOnOffloadNodes: a tap port on an offload node carries a
// guest's DHCP, pings and TCP to pods on an offload and a software node
// and back, under NetworkPolicy, across an agent restart with no ping
// lost; a vfio port sets its VF through the PF, binds its PCI function to
// vfio-pci and plumbs its representor, and gives it all back when
// deleted; a second vfio port finds no free VF and leaves nothing; an
// L2-only network carries two guests' own addressing and ARP between an
// offload and a software node.
func TestVMPortsOnOffloadNodes(t *testing.T) {
	guest.Require(t)
	rng := guest.VirtioRNG(t)
	native := pciDriver(t, rng)
	if native == "" || native == vf.VFIODriver {
		t.Fatalf("%s starts on %q", rng, native)
	}
	t.Cleanup(func() { _ = vf.NewBinder(vf.BinderOptions{}).Restore(rng, native) })
	// Pod namespaces exist before the agents start (ip netns exec gives
	// each agent a mount namespace where later bindings do not show).
	guest.AddNetns(t, "skvpp2")
	guest.AddNetns(t, "skvpp3")
	r := newRig(t, rng)
	n1, n2, n3 := r.nodes["n1"], r.nodes["n2"], r.nodes["n3"]
	r.mustCtl("network", "create", "blue", "--vni", "100")
	r.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24", "--dns", "198.51.100.53")
	r.mustCtl("network", "create", "green", "--vni", "200")

	// Pods on n2 (its veth standing in for VF 0, as in offloadvm) and n3.
	pods := map[string]string{}
	for _, pd := range []struct {
		name string
		n    *node
	}{{"skvpp2", n2}, {"skvpp3", n3}} {
		req := localapi.CreateRequest{Name: pd.name, Network: "blue", NetNS: "/run/netns/" + pd.name, IfName: "eth0",
			Labels: map[string]string{"app": "pod"}, Namespace: "default"}
		if pd.n.pf != "" {
			vf0 := 0
			req.PF, req.VF = pd.n.pf, &vf0
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		resp, err := localapi.NewClient(pd.n.sock).Create(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("pod %s on %s: %v", pd.name, pd.n.name, err)
		}
		pods[pd.name] = strings.Split(resp.IPs[0], "/")[0]
	}

	// A tap port on offload node n1, and a guest on it.
	start := time.Now()
	p := r.port("port", "create", "--vm", "vm1", "--network", "blue", "--node", "n1", "--label", "app=vm", "--namespace", "default")
	created := time.Since(start)
	if p.Kind != "tap" || p.Owner != "vm:vm1" || !p.Port.Ready || p.Port.HostIf == "" || len(p.Ips) != 1 {
		t.Fatalf("tap port %+v", p)
	}
	// A tap whose one bridge is the node's replication bridge (the
	// guest's broadcast: its DHCP discover, its ARP).
	if got := guest.In(t, n1.ns, ipBin, "-d", "link", "show", p.Port.HostIf); !strings.Contains(got, "tun type tap") || !strings.Contains(got, "master skrb") {
		t.Fatalf("%s is not a tap on the replication bridge:\n%s", p.Port.HostIf, got)
	}
	guest.TapGuest(t, n1.ns, p.Port.HostIf, "skvpg1", p.Mac)
	lease := dhcp(t, "skvpg1")
	reachable := time.Since(start)
	if want := fmt.Sprintf("ip=%s router=198.51.100.1 mtu=1450 dns=198.51.100.53", p.Ips[0]); lease != want {
		t.Fatalf("guest lease %q, want %q", lease, want)
	}
	t.Logf("tap port created in %v; guest leased its address %v after the create", created, reachable)
	vm1 := strings.Split(p.Ips[0], "/")[0]
	guest.Tools.MustPing(t, "skvpg1", "198.51.100.1", 2, 3*time.Second)
	guest.Tools.MustPing(t, "skvpg1", pods["skvpp2"], 2, 3*time.Second)
	guest.Tools.MustPing(t, "skvpg1", pods["skvpp3"], 2, 3*time.Second)
	guest.Tools.MustPing(t, "skvpp2", vm1, 2, 3*time.Second)
	guest.Tools.MustPing(t, "skvpp3", vm1, 2, 3*time.Second)
	tcp(t, "skvpg1", "skvpp2", pods["skvpp2"])
	tcp(t, "skvpp2", "skvpg1", vm1)
	tcp(t, "skvpp3", "skvpg1", vm1)
	// The port's rules sit on the tap, in software: a tap is the host's.
	testkit.Eventually(t, "the tap port's rules reported", 20*time.Second, func() (bool, string) {
		p = r.port("port", "get", p.Name)
		n := 0
		for _, rl := range p.OffloadRules {
			if rl.Device != p.Port.HostIf {
				continue
			}
			n++
			if rl.State != "software" || !strings.Contains(rl.Reason, "not a switchdev port") {
				return false, fmt.Sprintf("rule %+v", rl)
			}
		}
		return n > 0, fmt.Sprintf("%d rules on %s: %+v", n, p.Port.HostIf, p.OffloadRules)
	})

	// NetworkPolicy selects the VM by its label, on an offload node too.
	file := filepath.Join(t.TempDir(), "p.yaml")
	policy := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: vm-from-web, namespace: default}\n" +
		"spec: {podSelector: {matchLabels: {app: vm}}, ingress: [{from: [{podSelector: {matchLabels: {app: web}}}]}]}\n"
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	r.mustCtl("policy", "apply", "-f", file)
	testkit.Eventually(t, "the policy cuts pods off the VM", 30*time.Second, func() (bool, string) {
		return guest.Tools.Ping("skvpp2", vm1, 1, 2*time.Second) != nil && guest.Tools.Ping("skvpp3", vm1, 1, 2*time.Second) != nil, "a pod still reaches the VM"
	})
	r.mustCtl("delete", "policy", "default/vm-from-web")
	testkit.Eventually(t, "pods reach the VM again", 30*time.Second, func() (bool, string) {
		return guest.Tools.Ping("skvpp2", vm1, 1, 2*time.Second) == nil, "the pod does not reach the VM"
	})

	// vfio: refused where no VF can serve, then a real one on n1.
	if out, err := r.skiffctl("port", "create", "--vm", "vm2", "--network", "blue", "--node", "n3", "--kind", "vfio"); err == nil || !strings.Contains(out, `vfio on node "n3"`) {
		t.Errorf("vfio on the software node: %v %q", err, out)
	}
	v := r.port("port", "create", "--vm", "vm2", "--network", "blue", "--node", "n1", "--kind", "vfio", "--label", "app=vm")
	reps := guest.Representors(t, n1.ns)
	if v.Kind != "vfio" || !v.Port.Ready || v.Port.PciAddress != rng || v.Port.HostIf != reps["pf0vf0"] ||
		!strings.HasPrefix(v.Port.VfioGroup, "/dev/vfio/") || v.PF != n1.pf || v.VF == nil || *v.VF != 0 {
		t.Fatalf("vfio port %+v (representors %v)", v, reps)
	}
	if d := pciDriver(t, rng); d != vf.VFIODriver {
		t.Fatalf("the VF's PCI function %s is on %q, want vfio-pci", rng, d)
	}
	if _, err := os.Stat(v.Port.VfioGroup); err != nil {
		t.Errorf("the port's vfio group: %v", err)
	}
	line := vfLine(t, n1.ns, n1.pf, 0)
	for _, want := range []string{"link/ether " + v.Mac, "spoof checking on", "link-state auto", "trust off"} {
		if !strings.Contains(line, want) {
			t.Errorf("VF 0: %q lacks %q", line, want)
		}
	}
	testkit.Eventually(t, "the vfio port's rules on its representor", 20*time.Second, func() (bool, string) {
		v = r.port("port", "get", v.Name)
		n := 0
		for _, rl := range v.OffloadRules {
			if rl.Device == v.Port.HostIf {
				n++
				if rl.State != "refused" || !strings.Contains(rl.Reason, "netdevsim") {
					return false, fmt.Sprintf("rule %+v", rl)
				}
			}
		}
		return n > 0, fmt.Sprintf("%+v", v.OffloadRules)
	})
	// No second VF: refused, nothing stored, the first VF untouched.
	if out, err := r.skiffctl("port", "create", "--vm", "vm3", "--network", "blue", "--node", "n1", "--kind", "vfio"); err == nil || !strings.Contains(out, "no free VF") {
		t.Errorf("a second vfio port: %v %q", err, out)
	}
	if out := r.mustCtl("get", "endpoints"); strings.Contains(out, "vm3") {
		t.Errorf("the refused vfio port left an endpoint:\n%s", out)
	}

	// n1's agent restarts under traffic: no ping lost, the tap and the
	// VF binding stay as they were.
	tapIndex := strings.Fields(guest.In(t, n1.ns, ipBin, "-o", "link", "show", p.Port.HostIf))[0]
	pinger := exec.Command(ipBin, "netns", "exec", "skvpp2", "/bin/ping", "-i", "0.2", "-c", "40", "-W", "1", vm1)
	var pings guest.Buffer
	pinger.Stdout, pinger.Stderr = &pings, &pings
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	n1.agent.Signal(syscall.SIGKILL)
	n1.agent = guest.StartIn(t, n1.ns, "skiff-agent", n1.args...)
	testkit.Eventually(t, "n1 ready after its restart", 60*time.Second, func() (bool, string) {
		s, err := localapi.NewClient(n1.sock).Status(context.Background())
		return err == nil && s.Ready, fmt.Sprintf("%+v %v", s, err)
	})
	_ = pinger.Wait()
	if !strings.Contains(pings.String(), " 0% packet loss") {
		t.Fatalf("pings from a pod to the guest across n1's agent restart:\n%s", pings.String())
	}
	if got := strings.Fields(guest.In(t, n1.ns, ipBin, "-o", "link", "show", p.Port.HostIf))[0]; got != tapIndex {
		t.Errorf("the tap was made again across the restart (index %s, was %s)", got, tapIndex)
	}
	if d := pciDriver(t, rng); d != vf.VFIODriver {
		t.Errorf("after the restart the VF's function is on %q", d)
	}

	// Deleting the vfio port gives the VF back.
	r.mustCtl("port", "delete", "--vm", "vm2")
	testkit.Eventually(t, "the VF back on its driver, its MAC cleared", 30*time.Second, func() (bool, string) {
		l := vfLine(t, n1.ns, n1.pf, 0)
		d := pciDriver(t, rng)
		return d == native && strings.Contains(l, "link/ether 00:00:00:00:00:00"), fmt.Sprintf("driver %q, %s", d, l)
	})
	if out := guest.In(t, n1.ns, guest.TC, "filter", "show", "dev", reps["pf0vf0"], "ingress"); strings.TrimSpace(out) != "" {
		t.Errorf("filters left on the VF's representor:\n%s", out)
	}

	// An L2-only network: two guests address themselves and find each
	// other by ARP, across an offload and a software node.
	g3 := r.port("port", "create", "--vm", "vm3", "--network", "green", "--node", "n1")
	g4 := r.port("port", "create", "--vm", "vm4", "--network", "green", "--node", "n3")
	if len(g3.Ips) != 0 || len(g4.Ips) != 0 || !g3.Port.Ready || !g4.Port.Ready {
		t.Fatalf("L2-only ports %+v %+v", g3, g4)
	}
	guest.TapGuest(t, n1.ns, g3.Port.HostIf, "skvpg3", g3.Mac)
	guest.TapGuest(t, n3.ns, g4.Port.HostIf, "skvpg4", g4.Mac)
	guest.In(t, "skvpg3", ipBin, "addr", "add", "203.0.113.10/24", "dev", "eth0")
	guest.In(t, "skvpg4", ipBin, "addr", "add", "203.0.113.20/24", "dev", "eth0")
	guest.Tools.MustPing(t, "skvpg3", "203.0.113.20", 2, 3*time.Second)
	guest.Tools.MustPing(t, "skvpg4", "203.0.113.10", 2, 3*time.Second)
	if n := guest.In(t, "skvpg3", ipBin, "neigh", "show", "203.0.113.20"); !strings.Contains(n, g4.Mac) {
		t.Errorf("guest 3 resolved 203.0.113.20 to %q, want %s", n, g4.Mac)
	}

	// Deleting a VM's port removes its tap; its guest is cut off.
	r.mustCtl("port", "delete", "--vm", "vm1")
	testkit.Eventually(t, "vm1's tap gone from n1", 30*time.Second, func() (bool, string) {
		out := guest.In(t, n1.ns, ipBin, "-o", "link", "show", "type", "tun")
		return !strings.Contains(out, p.Port.HostIf+":"), out
	})
	if guest.Tools.Ping("skvpp2", vm1, 1, 2*time.Second) == nil {
		t.Errorf("the pod still reaches vm1 after its port was deleted")
	}
}
