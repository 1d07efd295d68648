package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// guestInit is the guest's /init: it loads virtio-net, takes its address
// by DHCP (the agent's answer is the only DHCP server there is), prints
// what it got, pings its gateway and the peer pod named on the kernel
// command line, connects to the pod's TCP listener, and then serves
// "ok" on TCP port 5202 until it is killed. Every step prints a GUEST-
// line on the serial console for the test to read.
const guestInit = guestBoot + `peer=$(sed -n 's/.*skiff.peer=\([0-9.]*\).*/\1/p' /proc/cmdline)
ip link set lo up
ip link set eth0 up
echo GUEST-UP
udhcpc -i eth0 -f -q -n -t 20 -T 1 -O mtu -s /dhcp.sh || echo GUEST-DHCP-FAILED
. /tmp/lease
ping -c 2 -W 2 $router >/dev/null && echo GUEST-GW-OK || echo GUEST-GW-FAILED
ping -c 2 -W 2 $peer >/dev/null && echo GUEST-PEER-OK || echo GUEST-PEER-FAILED
ok=
for i in $(seq 1 10); do a=$(nc -w 5 $peer 5201); [ "${a%% *}" = ok ] && { ok=1; break; }; sleep 1; done
[ -n "$ok" ] && echo GUEST-TCP-OUT-OK || echo GUEST-TCP-OUT-FAILED
nc -ll -p 5202 -e /bin/hello &
sleep 1
echo GUEST-LISTENING
while :; do sleep 60; done
`

// guestBoot is how every test guest's /init begins: busybox's applets,
// the kernel's file systems, the modules the guest image carries.
const guestBoot = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /usr/bin /usr/sbin /sbin
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.list); do insmod /lib/modules/$m.ko || echo "GUEST-INSMOD-FAILED $m"; done
`

// guestDHCP is udhcpc's script: it configures what the lease says.
const guestDHCP = `#!/bin/sh
case "$1" in
bound|renew)
	ip addr add $ip/$mask dev $interface
	[ -n "$mtu" ] && ip link set $interface mtu $mtu
	[ -n "$router" ] && ip route add default via $router
	echo "router=$router" > /tmp/lease
	echo "GUEST-LEASE ip=$ip/$mask router=$router mtu=$mtu dns=$dns"
	;;
esac
`

// bootGuest boots a guest in namespace ns on tap with MAC mac, and returns
// a channel of its console lines; the guest is killed at cleanup.
func bootGuest(t *testing.T, g kernelvm.Guest, ns, tap, mac, peer string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := qemuGuest(ctx, g, ns, tap, mac, "skiff.peer="+peer)
	lines, _ := consoleLines(t, cmd, cancel)
	return lines
}

// testGuest builds a guest image (Debian's kernel of the kernel VM cache,
// busybox) whose /init is init, with guestDHCP and /bin/hello (prints
// "ok", for nc -e). It fails t where qemu or the kernel is missing (make
// test installs and prepares both first).
func testGuest(t testing.TB, init string) kernelvm.Guest {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 is not installed: run hack/kernelvm/setup.sh (make test runs it)")
	}
	if _, err := os.Stat(filepath.Join(kernelvm.DefaultCacheDir, "current")); err != nil {
		t.Fatalf("no guest kernel prepared: run hack/kernelvm/setup.sh (make test runs it first): %v", err)
	}
	g, err := kernelvm.BuildGuest("", t.TempDir(), []string{"virtio_pci", "virtio_net"}, []kernelvm.GuestFile{
		{Path: "init", Mode: 0o755, Data: []byte(init)},
		{Path: "dhcp.sh", Mode: 0o755, Data: []byte(guestDHCP)},
		{Path: "bin/hello", Mode: 0o755, Data: []byte("#!/bin/sh\nprintf ok\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// qemuGuest is the qemu command of a test guest in namespace ns, on tap
// with MAC mac, its console on stdout, with args added to the kernel's
// command line.
func qemuGuest(ctx context.Context, g kernelvm.Guest, ns, tap, mac, args string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", "netns", "exec", ns, "qemu-system-x86_64",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "q35", "-cpu", "max", "-accel", "tcg", "-m", "256",
		"-kernel", g.Kernel, "-initrd", g.Initramfs,
		"-append", "console=ttyS0 quiet panic=-1 rdinit=/init "+args,
		"-serial", "stdio",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+mac)
}

// consoleLines starts a guest's qemu and returns a channel of its console
// lines (the guest's serial console and qemu's messages), and a function that kills it (cancel, cmd's
// context, then wait), which also runs when t ends.
func consoleLines(t testing.TB, cmd *exec.Cmd, cancel context.CancelFunc) (<-chan string, func()) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			// Every line: a guest that fails before its first GUEST-
			// line says why in the kernel's (quiet) messages.
			if l := strings.TrimSpace(sc.Text()); l != "" {
				lines <- l
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	return lines, stop
}

// expectGuest reads console lines until one starts with want, and returns
// it; a GUEST-...-FAILED line or a timeout fails the test.
func expectGuest(t *testing.T, lines <-chan string, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-lines:
			switch {
			case !ok:
				t.Fatalf("the guest's console ended before %s", want)
			case strings.HasPrefix(l, want):
				return l
			case strings.HasPrefix(l, "GUEST-") && (strings.HasSuffix(l, "-FAILED") || strings.Contains(l, "FAILED ")):
				t.Fatalf("guest: %s (waiting for %s)", l, want)
			}
			t.Logf("guest: %s", l)
		case <-deadline:
			t.Fatalf("no %s from the guest within %v", want, timeout)
		}
	}
}

type portJSON struct {
	Name      string            `json:"name"`
	Node      string            `json:"node"`
	Kind      string            `json:"kind"`
	Mac       string            `json:"mac"`
	Ips       []string          `json:"ips"`
	Owner     string            `json:"owner"`
	Labels    map[string]string `json:"labels"`
	Namespace string            `json:"namespace"`
	Port      struct {
		HostIf string `json:"hostIf"`
		Ready  bool   `json:"ready"`
	} `json:"port"`
}

func (c *cluster) port(args ...string) portJSON {
	c.t.Helper()
	var p portJSON
	out := c.mustCtl(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		c.t.Fatalf("skiffctl %v: %v\n%s", args, err, out)
	}
	return p
}

// taps lists the tap devices in a namespace.
func taps(t *testing.T, ns string) string {
	return strings.ReplaceAll(linkNames(testkit.Run(t, ns, "ip", "-o", "link", "show", "type", "tun")), ":", "")
}

// TestVMPortGuest boots a real guest (Debian's kernel under qemu, a
// busybox initramfs) on a tap port of node n1 made with skiffctl: the
// guest gets its address by DHCP from n1's agent, reaches its gateway and
// a pod on n2 over the overlay (ping, TCP), and the pod reaches it back; a
// NetworkPolicy selecting the VM by label is enforced on its traffic; bad
// port requests leave nothing behind; deleting the VM's ports removes the
// tap. VM ports made through n1's local API are checked as well.
func TestVMPortGuest(t *testing.T) {
	g := testGuest(t, guestInit)
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24", "--dns", "198.51.100.53")
	ctx := context.Background()
	n1, n2 := c.nodes["n1"], c.nodes["n2"]
	for _, n := range []*node{n1, n2} {
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			s, err := localapi.NewClient(n.socket).Status(ctx)
			if err != nil || !s.Ready {
				return fmt.Errorf("%s not ready: %+v %v", n.name, s, err)
			}
			return nil
		}))
	}
	// A pod on n2, listening on TCP 5201.
	podNS := testkit.New(t)
	pod, err := localapi.NewClient(n2.socket).Create(ctx, localapi.CreateRequest{Name: "pod2", Network: "blue", NetNS: testkit.Path(podNS),
		IfName: "eth0", Labels: map[string]string{"app": "pod"}, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	podIP := strings.Split(pod.IPs[0], "/")[0]
	testkit.Serve(t, podNS, podIP+":5201", "ok")

	// Bad input: a clear error naming the field, and nothing made.
	c.mustCtl("port", "create", "--vm", "taken", "--network", "blue", "--node", "n1", "--mac", "02:00:00:00:aa:01")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--vm", "vm1", "--network", "green", "--node", "n1"}, "network"},
		{[]string{"--vm", "vm1", "--network", "blue", "--node", "n9"}, `node "n9" does not exist`},
		{[]string{"--vm", "VM_1", "--network", "blue", "--node", "n1"}, "vm"},
		{[]string{"--vm", "vm1", "--network", "blue", "--node", "n1", "--kind", "vfio"}, "vfio on node \"n1\""},
		{[]string{"--vm", "vm1", "--network", "blue", "--node", "n1", "--kind", "veth"}, "kind"},
		{[]string{"--vm", "vm1", "--network", "blue", "--node", "n1", "--mac", "02:00:00:00:aa:01"}, "mac"},
	} {
		out, err := c.ctl(append([]string{"port", "create"}, bad.args...)...)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("port create %v: err %v, output %q; want an error with %q", bad.args, err, out, bad.want)
		}
	}
	c.mustCtl("port", "delete", "--vm", "taken")
	if out := c.mustCtl("get", "endpoints"); strings.Contains(out, "vm1") || strings.Contains(out, "taken") {
		t.Fatalf("refused ports left endpoints:\n%s", out)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if got := taps(t, n1.ns); got != "" {
			return fmt.Errorf("taps left on n1: %s", got)
		}
		return nil
	}))
	if out, err := c.ctl("port", "list", "--vm", "nobody"); err == nil || !strings.Contains(out, "nobody") {
		t.Errorf("port list of an unknown VM: err %v, output %q", err, out)
	}

	// The port: made, plumbed and attached before skiffctl returns.
	start := time.Now()
	p := c.port("port", "create", "--vm", "vm1", "--network", "blue", "--node", "n1", "--label", "app=vm", "--namespace", "default")
	created := time.Since(start)
	if p.Owner != "vm:vm1" || p.Kind != "tap" || !p.Port.Ready || p.Port.HostIf == "" || len(p.Ips) != 1 {
		t.Fatalf("port %+v", p)
	}
	if got := testkit.Run(t, n1.ns, "ip", "-d", "link", "show", p.Port.HostIf); !strings.Contains(got, "master skb100") || !strings.Contains(got, "tun type tap") {
		t.Fatalf("tap %s is not a tap on the network's bridge:\n%s", p.Port.HostIf, got)
	}
	if got := c.port("port", "get", p.Name); got.Name != p.Name || got.Port.HostIf != p.Port.HostIf {
		t.Fatalf("port get: %+v", got)
	}
	vmIP := strings.Split(p.Ips[0], "/")[0]

	lines := bootGuest(t, g, n1.ns, p.Port.HostIf, p.Mac, podIP)
	lease := expectGuest(t, lines, "GUEST-LEASE", 90*time.Second)
	if want := fmt.Sprintf("GUEST-LEASE ip=%s router=198.51.100.1 mtu=1450 dns=198.51.100.53", p.Ips[0]); lease != want {
		t.Fatalf("guest lease %q, want %q", lease, want)
	}
	reachable := time.Since(start)
	expectGuest(t, lines, "GUEST-GW-OK", 30*time.Second)
	expectGuest(t, lines, "GUEST-PEER-OK", 30*time.Second)
	expectGuest(t, lines, "GUEST-TCP-OUT-OK", 30*time.Second)
	expectGuest(t, lines, "GUEST-LISTENING", 30*time.Second)
	testkit.MustPing(t, podNS, vmIP, 2, 2*time.Second)
	if !testkit.Connects(podNS, net.JoinHostPort(vmIP, "5202"), time.Second) {
		t.Fatalf("the pod on n2 cannot open TCP to the guest %s:5202", vmIP)
	}
	t.Logf("port create took %v; port create to guest's lease %v", created, reachable)
	metrics := testkit.Run(t, n1.ns, "curl", "-s", "http://"+n1.ip+":9100/metrics")
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "skiff_agent_dhcp_answer_seconds_sum") || strings.HasPrefix(l, "skiff_agent_dhcp_answer_seconds_count") ||
			strings.HasPrefix(l, "skiff_agent_dhcp_replies_total") {
			t.Logf("n1 agent: %s", l)
		}
	}
	if !strings.Contains(metrics, `skiff_agent_dhcp_replies_total{type="ACK"} 1`) {
		t.Errorf("n1's agent did not count one DHCP ACK:\n%s", metrics)
	}

	// n1's agent restarts under traffic: the tap stays (same index), and
	// no ping between the pod and the guest is lost.
	tapIndex := strings.Fields(testkit.Run(t, n1.ns, "ip", "-o", "link", "show", p.Port.HostIf))[0]
	pinger := exec.Command("ip", "netns", "exec", podNS, "ping", "-i", "0.2", "-c", "25", "-W", "1", vmIP)
	var pings strings.Builder
	pinger.Stdout, pinger.Stderr = &pings, &pings
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stop(n1.agent)
	c.startAgent("n1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		s, err := localapi.NewClient(n1.socket).Status(ctx)
		if err != nil || !s.Ready {
			return fmt.Errorf("n1 not ready after its restart: %+v %v", s, err)
		}
		return nil
	}))
	_ = pinger.Wait()
	if !strings.Contains(pings.String(), " 0% packet loss") {
		t.Fatalf("pings from the pod to the guest across n1's agent restart:\n%s", pings.String())
	}
	if got := strings.Fields(testkit.Run(t, n1.ns, "ip", "-o", "link", "show", p.Port.HostIf))[0]; got != tapIndex {
		t.Fatalf("the tap was made again across the agent restart (index %s, was %s)", got, tapIndex)
	}

	// A policy selecting the VM by label: only app=web may reach it.
	file := filepath.Join(t.TempDir(), "p.yaml")
	policy := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: vm-from-web, namespace: default}\n" +
		"spec: {podSelector: {matchLabels: {app: vm}}, ingress: [{from: [{podSelector: {matchLabels: {app: web}}}]}]}\n"
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mustCtl("policy", "apply", "-f", file)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if testkit.Connects(podNS, net.JoinHostPort(vmIP, "5202"), time.Second) {
			return fmt.Errorf("the pod still reaches the guest under a policy that denies it")
		}
		return nil
	}))
	c.mustCtl("delete", "policy", "default/vm-from-web")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(podNS, net.JoinHostPort(vmIP, "5202"), time.Second) {
			return fmt.Errorf("the pod does not reach the guest once the policy is gone")
		}
		return nil
	}))

	// The local API of n1: a VM port without namespace, its owner vm:ID.
	la := localapi.NewClient(n1.socket)
	for _, bad := range []struct {
		r    localapi.CreateRequest
		want string
	}{
		{localapi.CreateRequest{Name: "vm2-0", Network: "blue", Kind: "tap", Owner: "vm2"}, "owner"},
		{localapi.CreateRequest{Name: "vm2-0", Network: "blue", Kind: "tap", Owner: "vm:vm2", IfName: "eth0"}, "ifName"},
		{localapi.CreateRequest{Name: "vm2-0", Network: "nowhere", Kind: "tap", Owner: "vm:vm2"}, "network"},
		{localapi.CreateRequest{Name: "vm2-0", Network: "blue", Kind: "tap", Owner: "vm:vm2", MAC: p.Mac}, "mac"},
	} {
		_, err := la.Create(ctx, bad.r)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("local create %+v: %v; want an error naming %q", bad.r, err, bad.want)
		}
	}
	r, err := la.Create(ctx, localapi.CreateRequest{Name: "vm2-0", Network: "blue", Kind: "tap", Owner: "vm:vm2", Labels: map[string]string{"app": "vm2"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "tap" || r.HostIf == "" || len(r.IPs) != 1 || r.Gateways[0] != "198.51.100.1" || r.MTU != 1450 || strings.Join(r.DNS, ",") != "198.51.100.53" {
		t.Fatalf("local create: %+v", r)
	}
	if got := taps(t, n1.ns); !strings.Contains(got, r.HostIf) {
		t.Fatalf("taps on n1: %s", got)
	}
	if eps, err := la.ListOwned(ctx, "vm:vm2"); err != nil || len(eps) != 1 || eps[0].HostIf != r.HostIf || eps[0].MAC != r.MAC {
		t.Fatalf("local list of vm:vm2: %+v %v", eps, err)
	}
	if deleted, err := la.DeleteOwned(ctx, "vm:vm2"); err != nil || strings.Join(deleted, ",") != "vm2-0" {
		t.Fatalf("local delete of vm:vm2: %v %v", deleted, err)
	}
	if got := taps(t, n1.ns); strings.Contains(got, r.HostIf) {
		t.Fatalf("the tap of vm2-0 is still on n1 after its delete returned: %s", got)
	}

	// Deleting the VM's ports removes its tap, and the guest is cut off.
	c.mustCtl("port", "delete", "--vm", "vm1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if got := taps(t, n1.ns); got != "" {
			return fmt.Errorf("taps left on n1 after the VM's ports were deleted: %s", got)
		}
		return nil
	}))
	if out := c.mustCtl("get", "endpoints"); strings.Contains(out, p.Name) {
		t.Fatalf("endpoint %s left:\n%s", p.Name, out)
	}
	if err := testkit.Ping(podNS, vmIP, 1, time.Second); err == nil {
		t.Fatalf("the pod still reaches the guest after its port was deleted")
	}
}
