package egressvm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// Service addresses (ClusterIPs) and the NodePort of the rules below.
const (
	svcWeb     = "203.0.113.10" // backends a (n1) and b (n2)
	svcSelf    = "203.0.113.11" // backend a: a through its own Service
	svcTenant1 = "203.0.113.12" // backend t1 (tenant, n1)
	svcTenant2 = "203.0.113.13" // backend t2 (tenant, n2)
	nodePort   = "30080"        // on each node, backend b (n2)
)

// kubeProxyRules are, for a node with underlay address node, what
// kube-proxy's nftables mode would write for the Services above
// (without a kubelet in the VM, the test writes them): DNAT in
// prerouting and output, KUBE-MARK-MASQ's mark for hairpin (a backend
// reaching itself) and for NodePorts, masquerade of what is marked at
// postrouting. kube-proxy picks a backend with numgen random; inc here
// makes consecutive connections alternate, so that two show both.
func kubeProxyRules(node string, ips map[string]string) string {
	ep := func(p string) string {
		return fmt.Sprintf("\tchain ep-%s {\n\t\tip saddr %s jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to %s:8080\n\t}\n", p, ips[p], ips[p])
	}
	return `table ip skiff-test-kube-proxy {
	chain mark-for-masquerade {
		meta mark set meta mark | 0x4000
	}
	chain masquerading {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x4000 == 0 return
		meta mark set meta mark ^ 0x4000
		masquerade fully-random
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain services {
		ip daddr ` + svcWeb + ` tcp dport 80 jump svc-web
		ip daddr ` + svcSelf + ` tcp dport 80 jump ep-a
		ip daddr ` + svcTenant1 + ` tcp dport 80 jump ep-t1
		ip daddr ` + svcTenant2 + ` tcp dport 80 jump ep-t2
		ip daddr ` + node + ` tcp dport ` + nodePort + ` jump nodeport-web
	}
	chain svc-web {
		numgen inc mod 2 vmap { 0 : jump ep-a, 1 : jump ep-b }
	}
	chain nodeport-web {
		jump mark-for-masquerade
		jump ep-b
	}
` + ep("a") + ep("b") + ep("t1") + ep("t2") + "}\n"
}

// TestOffloadServices: pods on offload nodes reach Services through
// kube-proxy's rules in the node's stack (the equivalent nftables rules,
// written by the test in each node's namespace). n1 and n2 run --mode
// offload; network pods (snat) has c and a on n1, b on n2; network
// tenant (none) t1 on n1, t2 on n2.
//   - a ClusterIP backed by a (n1) and b (n2) answers from both, to a
//     client on n1 (c) and one on n2 (b): the node DNATs the connection
//     that came in from its gateway skg100 and routes it back into the
//     overlay with the client's address (out of skg100 to a local
//     backend, the host port to a remote one); the backend sees the
//     client pod and answers it through the eswitch (or the tunnel),
//     where the rule delivering to the client's representor restores
//     the ClusterIP as the source (act_ct nat in the default zone,
//     which holds the node's DNAT);
//   - hairpin: a reaches itself through its own Service;
//   - a NodePort on n1 answers a client on the underlay (not a node)
//     from b on n2;
//   - isolation: c cannot reach the tenant pods through a Service
//     DNATed to them (the tenant pods still reach each other);
//   - NetworkPolicy applies after DNAT, to the client's address: with
//     b admitting ingress only from c (podSelector), c's Service
//     connections reach b and a's do not; c admitting no ingress does
//     not stop its Service connections' replies;
//   - egress too, in the node's stack after the DNAT (serviceEgress);
//   - a connection the node refuses leaves no way back in (replyPinhole).
func TestOffloadServices(t *testing.T) {
	guest.Require(t)
	nodes := []guest.RigNode{
		{Name: "n1", Mode: "offload", IP: "192.0.2.1", Pods: []string{"c", "a", "t1"}},
		{Name: "n2", Mode: "offload", IP: "192.0.2.2", Pods: []string{"b", "t2"}},
	}
	r := guest.StartRig(t, "sksv", 7402, 91, nodes)
	// A client on the underlay that is not a node.
	out := r.Outside(t, "out", "192.0.2.250")

	r.Ctl.Must("network", "create", "pods", "--vni", "100", "--egress", "snat")
	r.Ctl.Must("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	r.Ctl.Must("network", "create", "tenant", "--vni", "200")
	r.Ctl.Must("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	network := map[string]string{"a": "pods", "b": "pods", "c": "pods", "t1": "tenant", "t2": "tenant"}
	ips := map[string]string{}
	for _, n := range nodes {
		for _, p := range n.Pods {
			ips[p] = r.CreatePod(t, n, p, network[p])
			testkit.Serve(t, "sksvp"+p, ":8080", p)
		}
	}
	diag := func() string {
		s := diagnoseNodes("sksvn1", "sksvn2")
		for _, ns := range []string{"sksvn1", "sksvn2"} {
			o, _ := exec.Command(ipBin, "netns", "exec", ns, guest.NFT, "list", "ruleset").CombinedOutput()
			s += "==== " + ns + " nft\n" + string(o) + "\n"
		}
		return s
	}

	// The overlay carries TCP in both networks (the servers answer).
	testkit.Eventually(t, "pods reach each other's servers across the nodes", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, pr := range [][2]string{{"c", "a"}, {"c", "b"}, {"b", "a"}, {"t1", "t2"}, {"t2", "t1"}} {
			if _, _, err := testkit.Ask("sksvp"+pr[0], net.JoinHostPort(ips[pr[1]], "8080"), 3*time.Second); err != nil {
				failed = append(failed, pr[0]+"->"+pr[1]+": "+err.Error())
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})

	rules := map[string]string{}
	for _, n := range nodes {
		f := filepath.Join(r.Dir, n.Name+".nft")
		rules[n.Name] = f
		if err := os.WriteFile(f, []byte(kubeProxyRules(n.IP, ips)), 0o600); err != nil {
			t.Fatal(err)
		}
		in(t, "sksv"+n.Name, guest.NFT, "-f", f)
	}
	gw := map[string]string{} // the pods network's gateway address on each node
	for _, n := range nodes {
		f := strings.Fields(in(t, "sksv"+n.Name, ipBin, "-4", "-o", "addr", "show", "dev", "skg100"))
		if len(f) < 4 {
			t.Fatalf("%s: no address on skg100: %q", n.Name, f)
		}
		gw[n.Name] = strings.Split(f[3], "/")[0]
	}

	// The ClusterIP, from a client on each node: both backends, each
	// seeing the client pod's own address (no masquerade: the reply's
	// reverse translation is in the flower rules delivering it; a
	// connection is only established when the client saw the
	// ClusterIP answer its SYN).
	home := map[string]string{"a": "n1", "b": "n2", "c": "n1"}
	for _, client := range []string{"c", "b"} {
		var got []string
		for range 4 {
			server, seen, err := testkit.Ask("sksvp"+client, net.JoinHostPort(svcWeb, "80"), 3*time.Second)
			if err != nil {
				t.Errorf("%s -> Service %s: %v\n%s", client, svcWeb, err, diag())
				break
			}
			want := ips[client]
			if server == client {
				// Hairpin: kube-proxy masquerades it (KUBE-MARK-MASQ).
				want = gw[home[client]]
			}
			if seen != want {
				t.Errorf("%s (%s) -> Service -> %s (%s): seen from %s, want %s", client, home[client], server, home[server], seen, want)
			}
			got = append(got, server)
		}
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s -> Service %s: answered by %v, want a (n1) and b (n2)", client, svcWeb, got)
		} else {
			t.Logf("%s (%s) -> Service %s: answered by a (n1) and b (n2)", client, home[client], svcWeb)
		}
	}

	// Hairpin: a through its own Service.
	if server, seen, err := testkit.Ask("sksvpa", net.JoinHostPort(svcSelf, "80"), 3*time.Second); err != nil || server != "a" || seen != gw["n1"] {
		t.Errorf("a -> its own Service %s: %q seen from %q, %v; want a seeing the gateway %s\n%s", svcSelf, server, seen, err, gw["n1"], diag())
	} else {
		t.Logf("a -> its own Service: answered by a, seen from %s", seen)
	}

	// NodePort on n1 from the underlay, answered by b on n2, which sees
	// n1 (kube-proxy's masquerade).
	if server, seen, err := testkit.Ask(out, net.JoinHostPort("192.0.2.1", nodePort), 3*time.Second); err != nil || server != "b" || seen != "192.0.2.1" {
		t.Errorf("underlay -> NodePort 192.0.2.1:%s: %q seen from %q, %v; want b seeing 192.0.2.1\n%s", nodePort, server, seen, err, diag())
	} else {
		t.Log("underlay -> NodePort on n1: answered by b (n2), seen from 192.0.2.1")
	}

	// Isolation: no Service DNAT takes a snat pod into the tenant
	// network (egress none), on its node or the other; the tenant pods'
	// servers still answer each other.
	for _, svc := range []string{svcTenant1, svcTenant2} {
		if server, seen, err := testkit.Ask("sksvpc", net.JoinHostPort(svc, "80"), 3*time.Second); err == nil {
			t.Errorf("c reached tenant pod %s through Service %s (seen from %s)", server, svc, seen)
		}
	}
	if _, _, err := testkit.Ask("sksvpt1", net.JoinHostPort(ips["t2"], "8080"), 3*time.Second); err != nil {
		t.Errorf("the tenant pods no longer reach each other: %v", err)
	}

	// NetworkPolicy after DNAT, with the client's own address: b
	// admits ingress only from c (podSelector). c's Service
	// connections reach b (and b sees c); a's do not (a reaches only
	// itself through the Service: hairpin, masqueraded by kube-proxy).
	// c itself admits no ingress at all: the backends' replies to its
	// Service connections are replies, not new connections to c, also
	// from b on the other node (the connection DNATed to b left n1
	// through the host port, which tracks it in the network's zone).
	for name, spec := range map[string]string{
		"allow-c-to-b": `
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {app: c}}
`,
		"deny-to-c": `
  podSelector: {matchLabels: {app: c}}
  policyTypes: [Ingress]
`} {
		file := filepath.Join(r.Dir, name+".yaml")
		doc := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: " + name + ", namespace: default}\nspec:" + spec
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r.Ctl.Must("policy", "apply", "-f", file)
	}
	testkit.Eventually(t, "b admits c only, c admits nobody", 30*time.Second, func() (bool, string) {
		_, _, errA := testkit.Ask("sksvpa", net.JoinHostPort(ips["b"], "8080"), 3*time.Second)
		_, _, errC := testkit.Ask("sksvpc", net.JoinHostPort(ips["b"], "8080"), 3*time.Second)
		_, _, errToC := testkit.Ask("sksvpa", net.JoinHostPort(ips["c"], "8080"), 3*time.Second)
		return errA != nil && errC == nil && errToC != nil,
			fmt.Sprintf("a -> b directly: %v; c -> b directly: %v; a -> c directly: %v", errA, errC, errToC)
	})
	served := func(client string) (got []string) {
		for range 4 {
			server, seen, err := testkit.Ask("sksvp"+client, net.JoinHostPort(svcWeb, "80"), 3*time.Second)
			if err != nil {
				continue
			}
			got = append(got, server)
			if want := ips[client]; server == "b" && seen != want {
				t.Errorf("%s -> Service -> b: seen from %s, want %s", client, seen, want)
			}
		}
		slices.Sort(got)
		return got
	}
	if got := served("c"); !slices.Equal(got, []string{"a", "a", "b", "b"}) {
		t.Errorf("with b admitting c, c -> Service %s answered by %v, want a and b twice each\n%s", svcWeb, got, diag())
	} else {
		t.Logf("b admits c: c -> Service answered by %v", got)
	}
	if got := served("a"); !slices.Equal(got, []string{"a", "a"}) {
		t.Errorf("with b admitting only c, a -> Service %s answered by %v, want a twice (every other connection to b dropped)", svcWeb, got)
	} else {
		t.Logf("b admits only c: a -> Service answered by %v (its connections to b dropped)", got)
	}
	serviceEgress(t, r, "sksvpc", svcWeb, "203.0.113.0/24", ips, diag)
	replyPinhole(t, r, out, ips, diag)
}
