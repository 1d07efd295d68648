package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// mixInit is the /init of the guests of TestVMsAndPodsShareANetwork. It
// takes its address by DHCP, or sets skiff.addr from the kernel command
// line (an L2-only network, where nobody gives one), serves "ok" on TCP
// 5202, then pings each peer of skiff.peers (ip:port,...) and reads "ok"
// from its TCP port, and says GUEST-DONE. Both probes try again for a
// while before they say FAILED: an emulated guest (TCG) on a loaded host
// can take seconds to fork its listener's handler, and the reply's speed
// is not what is tested here (a blocked path still fails every try).
const mixInit = guestBoot + `addr=$(sed -n 's/.*skiff.addr=\([0-9./]*\).*/\1/p' /proc/cmdline)
peers=$(sed -n 's/.*skiff.peers=\([0-9.:,]*\).*/\1/p' /proc/cmdline | tr , ' ')
ip link set lo up
ip link set eth0 up
echo GUEST-UP
if [ -n "$addr" ]; then
	ip addr add $addr dev eth0 && echo "GUEST-STATIC $addr"
else
	udhcpc -i eth0 -f -q -n -t 20 -T 1 -O mtu -s /dhcp.sh || echo GUEST-DHCP-FAILED
fi
nc -ll -p 5202 -e /bin/hello &
for p in $peers; do
	ip=${p%:*}; port=${p#*:}; ok=
	for i in $(seq 1 40); do ping -c 1 -W 1 $ip >/dev/null && { ok=1; break; }; done
	[ -n "$ok" ] && echo "GUEST-PING-OK $ip" || echo "GUEST-PING-FAILED $ip"
	ok=
	for i in $(seq 1 10); do a=$(nc -w 5 $ip $port); [ "${a%% *}" = ok ] && { ok=1; break; }; sleep 1; done
	[ -n "$ok" ] && echo "GUEST-TCP-OK $ip" || echo "GUEST-TCP-FAILED $ip"
done
echo GUEST-DONE
while :; do sleep 60; done
`

// bootMixGuest boots a guest of mixInit on a tap of namespace ns; the
// guest is killed when t ends.
func bootMixGuest(t testing.TB, g kernelvm.Guest, ns, tap, mac, addr string, peers []string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args := "skiff.peers=" + strings.Join(peers, ",")
	if addr != "" {
		args += " skiff.addr=" + addr
	}
	cmd := qemuGuest(ctx, g, ns, tap, mac, args)
	return consoleLines(t, cmd, cancel)
}

// expectDone reads a guest's console until GUEST-DONE and checks that
// it reached every peer by ping and TCP.
func expectDone(t *testing.T, name string, lines <-chan string, peers []string) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range peers {
		ip := p[:strings.LastIndexByte(p, ':')]
		want["GUEST-PING-OK "+ip], want["GUEST-TCP-OK "+ip] = true, true
	}
	deadline := time.After(3 * time.Minute)
	for len(want) > 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: console ended; still waiting for %v", name, want)
			}
			t.Logf("%s: %s", name, l)
			if strings.HasPrefix(l, "GUEST-") && strings.Contains(l, "FAILED") {
				t.Fatalf("%s: %s", name, l)
			}
			delete(want, l)
		case <-deadline:
			t.Fatalf("%s: still waiting for %v", name, want)
		}
	}
}

// TestVMsAndPodsShareANetwork boots two real guests on tap ports of n1
// beside a pod on n1 and a pod on n2, all on one network: every guest
// reaches every pod and the other guest (ping and TCP) and the pods reach
// the guests. Then a guest on an L2-only network (no subnet: no DHCP, it
// addresses itself) and a pod on another node that addresses itself too
// find each other by ARP across the overlay.
func TestVMsAndPodsShareANetwork(t *testing.T) {
	g := testGuest(t, mixInit)
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	c.mustCtl("network", "create", "green", "--vni", "200")
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
	pod := func(n *node, name, network string) (ns, ip string) {
		t.Helper()
		ns = testkit.New(t)
		r, err := localapi.NewClient(n.socket).Create(ctx, localapi.CreateRequest{Name: name, Network: network, NetNS: testkit.Path(ns), IfName: "eth0"})
		if err != nil {
			t.Fatalf("pod %s on %s: %v", name, n.name, err)
		}
		if len(r.IPs) > 0 {
			ip = strings.Split(r.IPs[0], "/")[0]
			testkit.Serve(t, ns, ip+":5201", "ok")
		}
		return ns, ip
	}
	pod1NS, pod1 := pod(n1, "pod1", "blue")
	pod2NS, pod2 := pod(n2, "pod2", "blue")

	t.Run("two VMs and pods on one network", func(t *testing.T) {
		v1 := c.port("port", "create", "--vm", "vm1", "--network", "blue", "--node", "n1")
		v2 := c.port("port", "create", "--vm", "vm2", "--network", "blue", "--node", "n1")
		ip1, ip2 := strings.Split(v1.Ips[0], "/")[0], strings.Split(v2.Ips[0], "/")[0]
		peers1 := []string{pod1 + ":5201", pod2 + ":5201", ip2 + ":5202"}
		peers2 := []string{pod1 + ":5201", pod2 + ":5201", ip1 + ":5202"}
		g1, _ := bootMixGuest(t, g, n1.ns, v1.Port.HostIf, v1.Mac, "", peers1)
		g2, _ := bootMixGuest(t, g, n1.ns, v2.Port.HostIf, v2.Mac, "", peers2)
		expectDone(t, "vm1", g1, peers1)
		expectDone(t, "vm2", g2, peers2)
		for _, from := range []string{pod1NS, pod2NS} {
			for _, to := range []string{ip1, ip2} {
				testkit.MustPing(t, from, to, 1, 2*time.Second)
				if !testkit.Connects(from, net.JoinHostPort(to, "5202"), time.Second) {
					t.Errorf("a pod cannot open TCP to the guest %s:5202", to)
				}
			}
		}
		c.mustCtl("port", "delete", "--vm", "vm1")
		c.mustCtl("port", "delete", "--vm", "vm2")
	})

	t.Run("L2-only network", func(t *testing.T) {
		v3 := c.port("port", "create", "--vm", "vm3", "--network", "green", "--node", "n1")
		if len(v3.Ips) != 0 || !v3.Port.Ready {
			t.Fatalf("port on an L2-only network: %+v", v3)
		}
		pod3NS, ip := pod(n2, "pod3", "green")
		if ip != "" {
			t.Fatalf("a pod on an L2-only network got address %s", ip)
		}
		testkit.Run(t, pod3NS, "ip", "addr", "add", "203.0.113.20/24", "dev", "eth0")
		testkit.Serve(t, pod3NS, "203.0.113.20:5201", "ok")
		peers := []string{"203.0.113.20:5201"}
		g3, _ := bootMixGuest(t, g, n1.ns, v3.Port.HostIf, v3.Mac, "203.0.113.10/24", peers)
		expectDone(t, "vm3", g3, peers)
		testkit.MustPing(t, pod3NS, "203.0.113.10", 1, 2*time.Second)
		if n := testkit.Run(t, pod3NS, "ip", "neigh", "show", "203.0.113.10"); !strings.Contains(n, v3.Mac) {
			t.Errorf("the pod resolved the guest to %q, want %s", n, v3.Mac)
		}
		c.mustCtl("port", "delete", "--vm", "vm3")
	})
}
