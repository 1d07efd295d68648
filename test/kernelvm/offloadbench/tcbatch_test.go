package offloadbench

import (
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// The reference: iproute2 installing the filters the datapath installs,
// from the same compiled rules, with `tc -batch` (one process, one
// netlink socket, one request per filter waiting for its answer, in C).
// Each filter carries a cookie of the same length on its first action, as
// the datapath's do.

// compile compiles p's forwarding rules and policy, as the datapath does.
func compile(t testing.TB, p plan.Plan, in flower.Input) ([]flower.Rule, []flower.PolicyRule) {
	t.Helper()
	rules, err := flower.Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := flower.CompilePolicy(p, in, rules)
	if err != nil {
		t.Fatal(err)
	}
	return rules, pol
}

// batchRule appends a forwarding rule as a tc -batch line: in
// flower.ChainForward, where the datapath puts it.
func batchRule(t testing.TB, b *strings.Builder, r flower.Rule) {
	t.Helper()
	proto := "all"
	if r.EthType == flower.EthARP {
		proto = "arp"
	}
	fmt.Fprintf(b, "filter add dev %s ingress chain %d prio %d protocol %s flower", r.Dev, flower.ChainForward, r.Prio, proto)
	m := r.Match
	if m.EncKeyID != 0 {
		fmt.Fprintf(b, " enc_key_id %d", m.EncKeyID)
	}
	if m.EncDst.IsValid() {
		fmt.Fprintf(b, " enc_dst_ip %s", m.EncDst)
	}
	if m.EncDstPort != 0 {
		fmt.Fprintf(b, " enc_dst_port %d", m.EncDstPort)
	}
	if m.DstMAC != "" {
		fmt.Fprintf(b, " dst_mac %s", m.DstMAC)
	}
	if m.ArpTIP.IsValid() {
		fmt.Fprintf(b, " arp_op request arp_tip %s", m.ArpTIP)
	}
	for i, a := range r.Actions {
		switch a.Kind {
		case flower.TunnelSet:
			fmt.Fprintf(b, " action tunnel_key set id %d src_ip %s dst_ip %s dst_port %d", a.VNI, a.Src, a.Dst, a.DstPort)
		case flower.TunnelUnset:
			b.WriteString(" action tunnel_key unset")
		case flower.Redirect:
			fmt.Fprintf(b, " action mirred egress redirect dev %s", a.Dev)
		case flower.Mirror:
			fmt.Fprintf(b, " action mirred egress mirror dev %s", a.Dev)
		case flower.IngressRedirect:
			fmt.Fprintf(b, " action mirred ingress redirect dev %s", a.Dev)
		case flower.Continue:
			b.WriteString(" action continue")
		default:
			t.Fatalf("rule %s: action %q has no tc words here", r, a.Kind)
		}
		if i == 0 {
			fmt.Fprintf(b, " cookie %s", hex.EncodeToString(r.Cookie()))
		}
	}
	b.WriteString("\n")
}

// batchPolicy appends a policy rule (chains 0-2) as a tc -batch line.
func batchPolicy(t testing.TB, b *strings.Builder, r flower.PolicyRule) {
	t.Helper()
	m := r.Match
	proto := map[uint16]string{flower.EthIPv4: "ip", flower.EthIPv6: "ipv6", flower.EthARP: "arp", flower.EthAll: "all"}[m.EthType]
	if proto == "" {
		t.Fatalf("policy rule %s: ethertype %#x has no tc name here", r, m.EthType)
	}
	fmt.Fprintf(b, "filter add dev %s ingress chain %d prio %d protocol %s flower", r.Dev, r.Chain, r.Prio, proto)
	if m.EncKeyID != 0 {
		fmt.Fprintf(b, " enc_key_id %d", m.EncKeyID)
	}
	if m.IPProto != 0 {
		p := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[m.IPProto]
		if p == "" {
			t.Fatalf("policy rule %s: ip_proto %d has no tc name here", r, m.IPProto)
		}
		fmt.Fprintf(b, " ip_proto %s", p)
	}
	if m.Src.IsValid() {
		fmt.Fprintf(b, " src_ip %s", m.Src)
	}
	if m.Dst.IsValid() {
		fmt.Fprintf(b, " dst_ip %s", m.Dst)
	}
	if m.DstPortMin != 0 {
		fmt.Fprintf(b, " dst_port %d", m.DstPortMin)
		if m.DstPortMax != m.DstPortMin {
			fmt.Fprintf(b, "-%d", m.DstPortMax)
		}
	}
	if m.CtStateMask != 0 {
		fmt.Fprintf(b, " ct_state %s", flower.CtStateString(m.CtState, m.CtStateMask))
	}
	for i, a := range r.Actions {
		switch a.Kind {
		case flower.PolicyCt:
			b.WriteString(" action ct")
			if a.Commit {
				b.WriteString(" commit")
			}
			fmt.Fprintf(b, " zone %d pipe", a.Zone)
		case flower.PolicyGoto:
			fmt.Fprintf(b, " action goto chain %d", a.Chain)
		case flower.PolicyDrop:
			b.WriteString(" action drop")
		case flower.PolicyPass:
			b.WriteString(" action pass")
		case flower.PolicyContinue:
			b.WriteString(" action continue")
		default:
			t.Fatalf("policy rule %s: action %q has no tc words here", r, a.Kind)
		}
		if i == 0 {
			fmt.Fprintf(b, " cookie %s", hex.EncodeToString(flower.PolicyCookie(r)))
		}
	}
	b.WriteString("\n")
}

// reference installs the filters of plan p (compiled as the datapath
// does) with tc -batch in a namespace holding devices of the same names
// and kinds, checks it holds want per device, and returns its rate.
func reference(t *testing.T, p plan.Plan, want map[string]int) float64 {
	t.Helper()
	const ns = "skpbref"
	guest.AddNetns(t, ns)
	defer func() { _ = guest.Run(t, guest.IP, "netns", "del", ns) }() // free the filters before the traffic
	for _, e := range []string{"a", "b"} {
		guest.In(t, ns, guest.IP, "link", "add", rep(e), "type", "veth", "peer", "name", rep(e)+"p")
		guest.In(t, ns, guest.IP, "link", "set", rep(e), "up")
	}
	guest.In(t, ns, guest.IP, "link", "add", offload.VXLANName, "type", "vxlan", "external", "nolearning", "dstport", strconv.Itoa(flower.VXLANPort))
	guest.In(t, ns, guest.IP, "link", "set", offload.VXLANName, "up")
	guest.In(t, ns, guest.IP, "link", "add", gwPort, "type", "veth", "peer", "name", offload.GatewayName(vni))
	guest.In(t, ns, guest.IP, "link", "set", gwPort, "up")
	in := flower.Input{Reps: map[string]string{"a": rep("a"), "b": rep("b")}, VXLAN: offload.VXLANName,
		Gateways: map[string]flower.Gateway{"blue": {Port: gwPort, MAC: datapath.GatewayMAC(vni), IPs: []netip.Addr{netip.MustParseAddr(gatewayIP)}}}}
	start := time.Now()
	rules, pol := compile(t, p, in)
	t.Logf("FIGURE compiling the plan (forwarding and policy, %d filters), as every Apply does: %v", len(rules)+len(pol), time.Since(start).Round(time.Millisecond))
	file := batchFileOf(t, slices.Sorted(maps.Keys(want)), rules, pol)
	start = time.Now()
	guest.In(t, ns, guest.TC, "-batch", file)
	took := time.Since(start)
	got := map[string]int{}
	for d := range want {
		got[d] = countIn(t, ns, d)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("tc -batch: filters per device %v, the datapath's %v", got, want)
	}
	n := sum(got)
	rate := float64(n) / took.Seconds()
	t.Logf("FIGURE reference tc -batch: %d filters in %v: %.0f filters/s", n, took.Round(time.Millisecond), rate)
	return rate
}

// batchFileOf writes a tc -batch file adding clsact to each of devs,
// then the policy filters pol and the forwarding rules (as the datapath:
// the policy pipeline first), and returns its path.
func batchFileOf(t *testing.T, devs []string, rules []flower.Rule, pol []flower.PolicyRule) string {
	t.Helper()
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "qdisc add dev %s clsact\n", d)
	}
	for _, r := range pol {
		batchPolicy(t, &b, r)
	}
	for _, r := range rules {
		batchRule(t, &b, r)
	}
	file := filepath.Join(t.TempDir(), "filters.tc")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
