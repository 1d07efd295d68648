package egressvm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// svcWeb6 is the IPv6 ClusterIP of kubeProxyRules6, backed by a (n1) and
// b (n2).
const svcWeb6 = "2001:db8:5e::10"

// kubeProxyRules6 is kube-proxy's IPv6 ClusterIP in nftables (DNAT at
// prerouting and output; a backend reaching itself marked and
// masqueraded, as KUBE-MARK-MASQ does; numgen inc so that two
// connections show both backends), for backends at the IPv6 addresses
// ips6.
func kubeProxyRules6(ips6 map[string]string) string {
	ep := func(p string) string {
		return fmt.Sprintf("\tchain ep-%s {\n\t\tip6 saddr %s jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to [%s]:8080\n\t}\n", p, ips6[p], ips6[p])
	}
	return `table ip6 skiff-test-kube-proxy6 {
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
		ip6 daddr ` + svcWeb6 + ` tcp dport 80 jump svc-web
	}
	chain svc-web {
		numgen inc mod 2 vmap { 0 : jump ep-a, 1 : jump ep-b }
	}
` + ep("a") + ep("b") + "}\n"
}

// TestOffloadServicesIPv6: an IPv6 ClusterIP on offload nodes (n1: c and
// a; n2: b; network pods, snat, dual-stack). From c (n1) and from b (n2)
// it is answered by a and by b, each seeing the client pod's own IPv6
// address. The node DNATs what came in from its gateway and routes it
// back into the overlay: out of skg100 to a local backend, out of the
// host port skn100 to a remote one (the route to a remote pod's IPv6
// address: without it the node solicits the pod out of the anycast
// gateway and the pod's answer stays on its own node); the rule
// delivering the reply to the client's representor restores the
// ClusterIP (act_ct nat). Then c's egress policy applies to its IPv6
// Service connections after the DNAT (serviceEgress).
func TestOffloadServicesIPv6(t *testing.T) {
	guest.Require(t)
	nodes := []guest.RigNode{
		{Name: "n1", Mode: "offload", IP: "192.0.2.1", Pods: []string{"c", "a"}},
		{Name: "n2", Mode: "offload", IP: "192.0.2.2", Pods: []string{"b"}},
	}
	r := guest.StartRig(t, "sks6", 7403, 101, nodes)
	r.Ctl.Must("network", "create", "pods", "--vni", "100", "--egress", "snat")
	r.Ctl.Must("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	r.Ctl.Must("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
	ips6 := map[string]string{}
	for _, n := range nodes {
		for _, p := range n.Pods {
			r.CreatePod(t, n, p, "pods")
			ips6[p] = podIPv6(t, "sks6p"+p)
			testkit.Serve(t, "sks6p"+p, ":8080", p)
		}
	}
	diag := func() string {
		s := diagnoseNodes("sks6n1", "sks6n2")
		for _, ns := range []string{"sks6n1", "sks6n2"} {
			o, _ := exec.Command(ipBin, "netns", "exec", ns, "/bin/sh", "-c", guest.NFT+" list ruleset; "+guest.IP+" -6 route show table all; "+guest.IP+" -6 neigh").CombinedOutput()
			s += "==== " + ns + " nft, IPv6 routes and neighbours\n" + string(o) + "\n"
		}
		return s
	}
	testkit.Eventually(t, "pods reach each other's servers over IPv6", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, pr := range [][2]string{{"c", "a"}, {"c", "b"}, {"b", "a"}} {
			if _, _, err := testkit.Ask("sks6p"+pr[0], net.JoinHostPort(ips6[pr[1]], "8080"), 3*time.Second); err != nil {
				failed = append(failed, pr[0]+"->"+pr[1]+": "+err.Error())
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})
	for _, n := range nodes {
		f := filepath.Join(r.Dir, n.Name+".nft6")
		if err := os.WriteFile(f, []byte(kubeProxyRules6(ips6)), 0o600); err != nil {
			t.Fatal(err)
		}
		in(t, "sks6"+n.Name, guest.NFT, "-f", f)
	}
	home := map[string]string{"a": "n1", "b": "n2", "c": "n1"}
	for _, client := range []string{"c", "b"} {
		var got []string
		for range 4 {
			server, seen, err := testkit.Ask("sks6p"+client, net.JoinHostPort(svcWeb6, "80"), 3*time.Second)
			if err != nil {
				t.Errorf("%s (%s) -> Service [%s]:80: %v\n%s", client, home[client], svcWeb6, err, diag())
				break
			}
			want := ips6[client]
			if server == client {
				want = "2001:db8:100::1" // hairpin: masqueraded to the gateway
			}
			if seen != want {
				t.Errorf("%s (%s) -> Service -> %s (%s): seen from %s, want %s", client, home[client], server, home[server], seen, want)
			}
			got = append(got, server)
		}
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s -> Service [%s]:80: answered by %v, want a (n1) and b (n2)", client, svcWeb6, got)
		} else {
			t.Logf("%s (%s) -> IPv6 Service: answered by a (n1) and b (n2), the other seeing %s", client, home[client], ips6[client])
		}
	}
	// c's egress applies after the DNAT over IPv6 too.
	serviceEgress(t, r, "sks6pc", svcWeb6, "2001:db8:5e::/64", ips6, diag)
}
