package offload

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

func sh(t testing.TB, args ...string) string { t.Helper(); return guest.Run(t, args...) }

func nsExec(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return guest.In(t, ns, args...)
}

// peerMAC is the MAC of the remote node's VXLAN device (peerNode).
const peerMAC = "02:00:00:00:00:99"

// peerNode makes namespaces node and peer (deleted at cleanup), joined
// by a veth pair prefix+"u0" (node, 192.0.2.1/24) and prefix+"u1" (peer,
// 192.0.2.2/24), and gives peer a plain VXLAN device vx<vni> (MAC
// peerMAC, MTU 1450, VTEP 192.0.2.2, its remote the node) holding addrs
// (IPv6 without DAD): a remote node with one endpoint. It returns the
// node's path.
func peerNode(t testing.TB, node, peer, prefix string, vni int, addrs ...string) string {
	t.Helper()
	path := newNS(t, node)
	newNS(t, peer)
	sh(t, "/usr/sbin/ip", "link", "add", prefix+"u0", "netns", node, "type", "veth", "peer", "name", prefix+"u1", "netns", peer)
	nsExec(t, node, "/usr/sbin/ip", "addr", "add", "192.0.2.1/24", "dev", prefix+"u0")
	nsExec(t, node, "/usr/sbin/ip", "link", "set", prefix+"u0", "up")
	nsExec(t, peer, "/usr/sbin/ip", "addr", "add", "192.0.2.2/24", "dev", prefix+"u1")
	nsExec(t, peer, "/usr/sbin/ip", "link", "set", prefix+"u1", "up")
	vx := fmt.Sprintf("vx%d", vni)
	nsExec(t, peer, "/usr/sbin/ip", "link", "add", vx, "address", peerMAC, "mtu", "1450", "type", "vxlan", "id", fmt.Sprint(vni),
		"local", "192.0.2.2", "remote", "192.0.2.1", "dstport", "4789", "nolearning")
	for _, a := range addrs {
		args := []string{"/usr/sbin/ip", "addr", "add", a, "dev", vx}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		nsExec(t, peer, args...)
	}
	nsExec(t, peer, "/usr/sbin/ip", "link", "set", vx, "up")
	return path
}

// vethPod makes namespace pod (deleted at cleanup) with eth0 (mac, MTU
// 1450, addrs: IPv6 without DAD), a veth whose host side in node is the
// endpoint name's host interface, and returns the endpoint of network.
func vethPod(t testing.TB, node, pod, name, network, mac string, addrs ...string) plan.Endpoint {
	t.Helper()
	newNS(t, pod)
	host := datapath.HostIfName(name)
	sh(t, "/usr/sbin/ip", "link", "add", host, "netns", node, "type", "veth", "peer", "name", "eth0", "netns", pod)
	nsExec(t, node, "/usr/sbin/ip", "link", "set", host, "alias", datapath.HostIfAlias(name), "up")
	nsExec(t, pod, "/usr/sbin/ip", "link", "set", "eth0", "address", mac, "mtu", "1450", "up")
	e := plan.Endpoint{Name: name, Network: network, Kind: plan.KindVeth, MAC: mac, VFIndex: -1}
	for _, a := range addrs {
		nsExec(t, pod, "/usr/sbin/ip", "addr", "add", a, "dev", "eth0", "nodad")
		e.IPs = append(e.IPs, netip.MustParsePrefix(a))
	}
	return e
}

// newNS makes a namespace deleted at cleanup and returns its path.
func newNS(t testing.TB, name string) string {
	t.Helper()
	guest.AddNetns(t, name)
	return "/run/netns/" + name
}

// tcFilter is a filter as iproute2 reports it (an observer independent of
// Skiff's tc codec).
type tcFilter struct {
	Pref    int    `json:"pref"`
	Kind    string `json:"kind"`
	Options struct {
		Handle  uint32 `json:"handle"`
		InHW    bool   `json:"in_hw"`
		NotInHW bool   `json:"not_in_hw"`
		SkipSW  bool   `json:"skip_sw"`
		Actions []struct {
			Kind  string `json:"kind"`
			Stats struct {
				Packets uint64 `json:"packets"`
			} `json:"stats"`
		} `json:"actions"`
	} `json:"options"`
}

func filters(t testing.TB, ns, dev string) []tcFilter {
	t.Helper()
	var fs []tcFilter
	out := nsExec(t, ns, "/usr/sbin/tc", "-j", "-s", "filter", "show", "dev", dev, "ingress")
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("tc -j: %v\n%s", err, out)
	}
	var real []tcFilter
	for _, f := range fs {
		if f.Options.Handle != 0 {
			real = append(real, f)
		}
	}
	return real
}

func handles(t testing.TB, ns string, devs ...string) []string {
	var out []string
	for _, d := range devs {
		for _, f := range filters(t, ns, d) {
			out = append(out, fmt.Sprintf("%s/%d/%#x", d, f.Pref, f.Options.Handle))
		}
	}
	slices.Sort(out)
	return out
}

// TestApply runs in the kernel VM: a node namespace with two pods (veths
// standing in for VFs, their host sides as representors) and a netdevsim
// VF representor as a third endpoint's, an underlay to a peer namespace
// that plays the remote VTEP. It checks the rules through transitions with
// iproute2, that a re-apply writes nothing, that drift is repaired, that
// netdevsim's refusal of skip_sw is kept per rule while the rule runs in
// software, that real pings go through the local rules (their counters
// move), and that foreign filters are left alone.
func TestApply(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	node := newNS(t, "skdpnode")
	newNS(t, "skdppeer")
	for _, pod := range []string{"skdppa", "skdppb"} {
		newNS(t, pod)
	}
	// netdevsim created from inside the node namespace lives there.
	nsExec(t, "skdpnode", "/bin/sh", "-c", "echo '71 1' > /sys/bus/netdevsim/new_device")
	t.Cleanup(func() { _ = os.WriteFile("/sys/bus/netdevsim/del_device", []byte("71"), 0) })
	time.Sleep(300 * time.Millisecond)
	nsExec(t, "skdpnode", "/bin/sh", "-c", "echo 1 > /sys/bus/netdevsim/devices/netdevsim71/sriov_numvfs")
	nsExec(t, "skdpnode", "/usr/sbin/devlink", "dev", "eswitch", "set", "netdevsim/netdevsim71", "mode", "switchdev")
	time.Sleep(300 * time.Millisecond)
	var rep string
	for _, l := range strings.Fields(nsExec(t, "skdpnode", "/bin/sh", "-c", "for d in /sys/class/net/*; do echo $(basename $d)=$(cat $d/phys_port_name 2>/dev/null); done")) {
		if strings.HasSuffix(l, "=pf0vf0") {
			rep = strings.TrimSuffix(l, "=pf0vf0")
		}
	}
	if rep == "" {
		t.Fatal("no pf0vf0 representor")
	}
	nsExec(t, "skdpnode", "/usr/sbin/ip", "link", "set", rep, "up")

	// Underlay.
	sh(t, "/usr/sbin/ip", "link", "add", "skdpu0", "netns", "skdpnode", "type", "veth", "peer", "name", "skdpu1", "netns", "skdppeer")
	nsExec(t, "skdpnode", "/usr/sbin/ip", "addr", "add", "192.0.2.1/24", "dev", "skdpu0")
	nsExec(t, "skdpnode", "/usr/sbin/ip", "link", "set", "skdpu0", "up")
	nsExec(t, "skdppeer", "/usr/sbin/ip", "addr", "add", "192.0.2.2/24", "dev", "skdpu1")
	nsExec(t, "skdppeer", "/usr/sbin/ip", "link", "set", "skdpu1", "up")
	nsExec(t, "skdpnode", "/usr/sbin/ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.2")

	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}
	pods := map[string]string{"a": "skdppa", "b": "skdppb"}
	for i, name := range []string{"a", "b"} {
		mac := fmt.Sprintf("02:00:00:00:00:%02x", 10+i)
		ip := fmt.Sprintf("198.51.100.%d", 10+i)
		host := datapath.HostIfName(name)
		sh(t, "/usr/sbin/ip", "link", "add", host, "netns", "skdpnode", "type", "veth", "peer", "name", "eth0", "netns", pods[name])
		nsExec(t, "skdpnode", "/usr/sbin/ip", "link", "set", host, "alias", datapath.HostIfAlias(name), "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "link", "set", "eth0", "address", mac, "mtu", "1450", "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "addr", "add", ip+"/24", "dev", "eth0")
		p.Local[name] = plan.Endpoint{Name: name, Network: "blue", Kind: plan.KindVeth, MAC: mac, IPs: []netip.Prefix{netip.MustParsePrefix(ip + "/24")}, VFIndex: -1}
	}
	p.Local["v"] = plan.Endpoint{Name: "v", Network: "blue", Kind: plan.KindVF, MAC: "02:00:00:00:00:0c", IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.12/24")}, VFIndex: 0}
	p.Remote["r"] = plan.Remote{Name: "r", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01", IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.1/24")}}

	reps := func(e plan.Endpoint) (Port, bool) {
		if e.Kind == plan.KindVF {
			return Port{Rep: rep}, true
		}
		return Port{Rep: datapath.HostIfName(e.Name)}, true
	}
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps, TunnelHardware: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	ha, hb := datapath.HostIfName("a"), datapath.HostIfName("b")
	devs := []string{ha, hb, rep, VXLANName}

	// A foreign filter at one of Skiff's priorities, without Skiff's
	// cookie, on a representor: it must survive everything.
	nsExec(t, "skdpnode", "/usr/sbin/tc", "qdisc", "add", "dev", rep, "clsact")
	nsExec(t, "skdpnode", "/usr/sbin/tc", "filter", "add", "dev", rep, "ingress", "prio", fmt.Sprint(flower.PrioUnicast), "protocol", "all",
		"flower", "dst_mac", "02:99:99:99:99:99", "action", "drop")

	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, d := range devs {
		counts[d] = len(filters(t, "skdpnode", d))
	}
	// a, b, v each: 2 local + 1 encap + 2 local ARP = 5, and chain 0's
	// filter sending all to them; rep also has the foreign filter.
	// VXLAN: 3 decap + 3 ARP, and chain 0's. (Broadcast, and ARP for the
	// remote endpoint, are the replication bridge's.)
	want := map[string]int{ha: 6, hb: 6, rep: 7, VXLANName: 7}
	if !maps.Equal(counts, want) {
		t.Fatalf("filters per device %v, want %v", counts, want)
	}
	vx := nsExec(t, "skdpnode", "/usr/sbin/ip", "-d", "link", "show", VXLANName)
	for _, w := range []string{"external", "nolearning", "dstport 4789", "skiff:vxlan:external", "UP"} {
		if !strings.Contains(vx, w) {
			t.Errorf("%s lacks %q:\n%s", VXLANName, w, vx)
		}
	}

	// States: netdevsim refuses skip_sw and says why; veths were not
	// asked; the VXLAN device was asked and refused by the kernel.
	states := dp.Rules()
	for _, s := range states["v"] {
		if s.Rule.Dev != rep {
			continue
		}
		if s.State != flower.StateRefused || !strings.Contains(s.Reason, "only offload of BPF classifiers supported") {
			t.Errorf("rule on netdevsim %s: state %q reason %q", s.Rule, s.State, s.Reason)
		}
	}
	for _, s := range states["a"] {
		switch s.Rule.Dev {
		case ha:
			if s.State != flower.StateSoftware || !strings.Contains(s.Reason, "not a switchdev port") {
				t.Errorf("rule on veth %s: state %q reason %q", s.Rule, s.State, s.Reason)
			}
		case VXLANName:
			if s.State != flower.StateRefused || s.Reason == "" {
				t.Errorf("rule on %s %s: state %q reason %q", VXLANName, s.Rule, s.State, s.Reason)
			}
			t.Logf("vxlan rule state %s: %s", s.State, s.Reason)
		}
	}
	for _, f := range filters(t, "skdpnode", rep) {
		if f.Options.InHW || f.Options.SkipSW || !f.Options.NotInHW {
			t.Errorf("filter on %s: in_hw %v skip_sw %v not_in_hw %v", rep, f.Options.InHW, f.Options.SkipSW, f.Options.NotInHW)
		}
	}

	// Re-apply: nothing written, nothing read (the first Apply's own
	// writes made chains, whose notifications are not someone else's
	// change), same handles.
	before, w0, m0 := handles(t, "skdpnode", devs...), dp.Writes(), dp.TCMessages()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if w, m := dp.Writes()-w0, dp.TCMessages()-m0; w != 0 || m != 0 {
		t.Errorf("re-apply wrote %d times, %d tc messages", w, m)
	}
	if after := handles(t, "skdpnode", devs...); !slices.Equal(before, after) {
		t.Errorf("handles changed on re-apply:\n%v\n%v", before, after)
	}

	// Real traffic between the two pods goes through the local rules.
	nsExec(t, "skdppa", "/bin/ping", "-c", "3", "-W", "2", "198.51.100.11")
	moved := false
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	for _, s := range dp.Rules()["a"] {
		if s.Rule.Kind == flower.KindLocal && s.Packets >= 3 {
			moved = true
		}
	}
	if !moved {
		t.Errorf("the local rule of a did not count the pings: %+v", dp.Rules()["a"])
	}

	// Drift: someone deletes one of Skiff's filters; the next Apply puts
	// it back and touches nothing else.
	f := filters(t, "skdpnode", hb)[0]
	proto := "all"
	if f.Pref == int(flower.PrioARP) {
		proto = "arp"
	}
	nsExec(t, "skdpnode", "/usr/sbin/tc", "filter", "del", "dev", hb, "ingress", "prio", fmt.Sprint(f.Pref), "handle", fmt.Sprintf("%#x", f.Options.Handle), "protocol", proto, "flower")
	w0 = dp.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if w := dp.Writes() - w0; w != 1 || len(filters(t, "skdpnode", hb)) != 6 {
		t.Errorf("drift repair wrote %d times; %s has %d filters", w, hb, len(filters(t, "skdpnode", hb)))
	}

	// Transition: the remote endpoint moves to another VTEP: its encap
	// rules are replaced in place (same handles) and its entry in skvx's
	// table moves, nothing else.
	before = handles(t, "skdpnode", devs...)
	r := p.Remote["r"]
	r.VTEP = netip.MustParseAddr("203.0.113.2")
	p.Remote["r"] = r
	w0 = dp.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	// 3 endpoints x encap = 3 replacements, plus the 1 that netdevsim
	// refuses in hardware first, plus skvx's entry deleted and added.
	if w := dp.Writes() - w0; w != 6 {
		t.Errorf("moving a remote endpoint wrote %d times, want 6", w)
	}
	if after := handles(t, "skdpnode", devs...); !slices.Equal(before, after) {
		t.Errorf("handles changed on replace:\n%v\n%v", before, after)
	}
	out := nsExec(t, "skdpnode", "/usr/sbin/tc", "filter", "show", "dev", ha, "ingress")
	if !strings.Contains(out, "dst_ip 203.0.113.2") || strings.Contains(out, "dst_ip 192.0.2.2\n") && strings.Count(out, "dst_ip 192.0.2.2") > 1 {
		t.Errorf("after the move:\n%s", out)
	}

	// Transition: endpoint v leaves the plan: its rules go from the
	// representor (which stays), the foreign filter stays.
	delete(p.Local, "v")
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	left := filters(t, "skdpnode", rep)
	if len(left) != 1 || len(left[0].Options.Actions) != 1 || left[0].Options.Actions[0].Kind != "gact" {
		t.Errorf("%s after v left: %+v", rep, left)
	}
	// Everything leaves: the VXLAN device goes too.
	delete(p.Local, "a")
	delete(p.Local, "b")
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if n := len(filters(t, "skdpnode", ha)); n != 0 {
		t.Errorf("%s keeps %d filters", ha, n)
	}
	if _, err := exec.Command("/usr/sbin/ip", "netns", "exec", "skdpnode", "/usr/sbin/ip", "link", "show", VXLANName).CombinedOutput(); err == nil {
		t.Errorf("%s still exists", VXLANName)
	}
}

// TestApplyPolicy runs in the kernel VM: two pods on a node (veths as
// representors), b isolated for ingress and open to the members of a
// group. Real pings show the policy: allowed while a is a member, replies
// of b's own connections pass, dropped (and counted) once a leaves the
// group; a group change writes only the filters of that member; re-apply
// writes nothing; a foreign filter matching ct_state is left alone and
// does not break Skiff's dumps.
func TestApplyPolicy(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	node := newNS(t, "skpnode")
	pods := map[string]string{"a": "skppa", "b": "skppb"}
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, Subnets: []plan.Subnet{{Name: "blue-v4", Network: "blue",
		CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	nsExec(t, "skpnode", "/usr/sbin/ip", "link", "add", "skpu0", "type", "dummy")
	nsExec(t, "skpnode", "/usr/sbin/ip", "addr", "add", "192.0.2.1/24", "dev", "skpu0")
	nsExec(t, "skpnode", "/usr/sbin/ip", "link", "set", "skpu0", "up")
	// A routing node: new interfaces forward unless told otherwise.
	nsExec(t, "skpnode", "/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	for i, name := range []string{"a", "b"} {
		newNS(t, pods[name])
		mac := fmt.Sprintf("02:00:00:00:00:%02x", 10+i)
		ip := fmt.Sprintf("198.51.100.%d", 10+i)
		host := datapath.HostIfName(name)
		sh(t, "/usr/sbin/ip", "link", "add", host, "netns", "skpnode", "type", "veth", "peer", "name", "eth0", "netns", pods[name])
		nsExec(t, "skpnode", "/usr/sbin/ip", "link", "set", host, "alias", datapath.HostIfAlias(name), "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "link", "set", "eth0", "address", mac, "mtu", "1450", "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "addr", "add", ip+"/24", "dev", "eth0")
		p.Local[name] = plan.Endpoint{Name: name, Network: "blue", Kind: plan.KindVeth, MAC: mac, IPs: []netip.Prefix{netip.MustParsePrefix(ip + "/24")}, VFIndex: -1}
	}
	ha, hb := datapath.HostIfName("a"), datapath.HostIfName("b")
	reps := func(e plan.Endpoint) (Port, bool) { return Port{Rep: datapath.HostIfName(e.Name)}, true }
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	apply := func(what string) int {
		t.Helper()
		w0 := dp.Writes()
		if err := dp.Apply(p); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return dp.Writes() - w0
	}
	ping := func(from, to string) bool {
		_, err := exec.Command("/usr/sbin/ip", "netns", "exec", pods[from], "/bin/ping", "-c", "1", "-W", "1", p.Local[to].IPs[0].Addr().String()).CombinedOutput()
		return err == nil
	}
	// A foreign filter that matches ct_state, ahead of Skiff's.
	apply("open")
	nsExec(t, "skpnode", "/usr/sbin/tc", "filter", "add", "dev", ha, "ingress", "prio", "7", "protocol", "ip", "flower", "ct_state", "+trk+inv", "action", "drop")
	if !ping("a", "b") || !ping("b", "a") {
		t.Fatal("no policy: pings fail")
	}
	// The gateway answers and forwards nothing: set in the node's
	// namespace, not the caller's.
	if v := strings.TrimSpace(nsExec(t, "skpnode", "/bin/cat", "/proc/sys/net/ipv4/conf/"+GatewayName(100)+"/forwarding")); v != "0" {
		t.Errorf("forwarding on the gateway %s: %q", GatewayName(100), v)
	}
	fromNode := func(to string) bool {
		_, err := exec.Command("/usr/sbin/ip", "netns", "exec", "skpnode", "/bin/ping", "-c", "1", "-W", "1", p.Local[to].IPs[0].Addr().String()).CombinedOutput()
		return err == nil
	}
	if !fromNode("b") {
		t.Error("no policy: the node does not reach b through its gateway")
	}

	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{netip.MustParseAddr("198.51.100.10")}}
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true, Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "g"}}},
		{Ports: []plan.PolicyPort{{Protocol: "SCTP", Port: 80}}}}}
	// b -> a is allowed before, during and after: not one packet of it
	// may be lost while the pipeline is put in front of forwarding.
	if sent, lost := udpWhile(t, pods["b"], pods["a"], "198.51.100.10", func() { apply("b isolated") }); lost != 0 {
		t.Errorf("applying the policy lost %d of %d packets of an allowed flow", lost, sent)
	}
	chain2 := nsExec(t, "skpnode", "/usr/sbin/tc", "filter", "show", "dev", ha, "ingress", "chain", "2")
	for _, w := range []string{"ct_state +trk+new", "src_ip 198.51.100.10", "dst_ip 198.51.100.11", "ct commit zone 101", "goto chain 3", "action order 1: gact action drop",
		"ip_proto sctp", "dst_port 80"} { // the one port rule: SCTP 80
		if !strings.Contains(chain2, w) {
			t.Errorf("iproute2 does not read %q back from chain 2 of %s:\n%s", w, ha, chain2)
		}
	}
	if strings.Contains(chain2, "src_port") {
		t.Errorf("a filter of chain 2 of %s matches a source port:\n%s", ha, chain2)
	}
	if !ping("a", "b") {
		t.Error("a is in the group: a -> b must pass")
	}
	if !ping("b", "a") {
		t.Error("b -> a: b is not isolated for egress and the replies are established: must pass")
	}
	// From the node (its gateway address is not in the group), through
	// the gateway port's pipeline.
	if fromNode("b") {
		t.Error("the node is not in the group: node -> b must be dropped")
	}
	if !fromNode("a") {
		t.Error("a is not isolated: node -> a must pass")
	}
	if w := apply("re-apply"); w != 0 {
		t.Errorf("re-apply wrote %d times", w)
	}
	// A restarted agent (a new datapath on the same kernel state) writes
	// nothing either, and the handles stay.
	gwPort := GatewayPortName(100)
	before := handles(t, "skpnode", ha, hb, VXLANName, gwPort)
	dp2, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	if err := dp2.Apply(p); err != nil {
		t.Fatal(err)
	}
	if w := dp2.Writes(); w != 0 {
		t.Errorf("a restarted datapath wrote %d times", w)
	}
	dp2.Close()
	if after := handles(t, "skpnode", ha, hb, VXLANName, gwPort); !slices.Equal(before, after) {
		t.Errorf("handles changed across the restart:\n%v\n%v", before, after)
	}

	// a leaves the group: the filters of that member go (on a's
	// representor and on the VXLAN device), nothing else is written.
	p.Groups["g"] = plan.AddressGroup{Name: "g"}
	if w := apply("a leaves the group"); w != 3 {
		t.Errorf("one member leaving wrote %d times, want 3 (its filter on %s, %s and %s)", w, ha, VXLANName, gwPort)
	}
	if ping("a", "b") {
		t.Error("a left the group: a -> b must be dropped")
	}
	if !ping("b", "a") {
		t.Error("b -> a must still pass")
	}
	cs, err := dp.PolicyCounters()
	if err != nil {
		t.Fatal(err)
	}
	var dropped uint64
	for _, c := range cs {
		if c.Endpoint == "b" && c.Rule == -1 {
			dropped += c.Packets
		}
	}
	if dropped == 0 {
		t.Errorf("the default deny of b counted nothing: %+v", cs)
	}

	// Policies gone: no conntrack, only chain 0's filters ahead of
	// forwarding; the foreign filter is still there.
	delete(p.Policies, "b")
	if sent, lost := udpWhile(t, pods["b"], pods["a"], "198.51.100.10", func() { apply("policy removed") }); lost != 0 {
		t.Errorf("removing the policy lost %d of %d packets of an allowed flow", lost, sent)
	}
	if !ping("a", "b") {
		t.Error("policy removed: a -> b must pass")
	}
	for _, d := range []string{ha, hb} {
		out := nsExec(t, "skpnode", "/usr/sbin/tc", "filter", "show", "dev", d, "ingress")
		if strings.Contains(out, "ct commit") || strings.Contains(out, "chain 1") || strings.Contains(out, "chain 2") {
			t.Errorf("%s keeps policy filters:\n%s", d, out)
		}
	}
	if out := nsExec(t, "skpnode", "/usr/sbin/tc", "filter", "show", "dev", ha, "ingress", "prio", "7"); !strings.Contains(out, "ct_state +trk+inv") {
		t.Errorf("the foreign filter is gone:\n%s", out)
	}
	if w := apply("re-apply"); w != 0 {
		t.Errorf("re-apply wrote %d times", w)
	}
}

// udpWhile sends numbered UDP datagrams from namespace from to addr in
// namespace to, one every 200µs, from before fn starts until 200 ms after
// it returns, and returns how many were sent and how many never arrived.
func udpWhile(t *testing.T, from, to, addr string, fn func()) (sent, lost int) {
	t.Helper()
	var srv, cli net.PacketConn
	guest.InNetns(t, to, func() (err error) { srv, err = net.ListenPacket("udp4", addr+":9999"); return err })
	defer srv.Close()
	guest.InNetns(t, from, func() (err error) { cli, err = net.ListenPacket("udp4", ":0"); return err })
	defer cli.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(addr), Port: 9999}
	got := map[uint32]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 64)
		for {
			srv.SetReadDeadline(time.Now().Add(time.Second))
			n, _, err := srv.ReadFrom(b)
			if err != nil {
				return
			}
			if n == 4 {
				got[binary.BigEndian.Uint32(b)] = true
			}
		}
	}()
	stop := make(chan struct{})
	finished := make(chan int)
	go func() {
		n := uint32(0)
		for {
			select {
			case <-stop:
				finished <- int(n)
				return
			default:
			}
			if _, err := cli.WriteTo(binary.BigEndian.AppendUint32(nil, n), dst); err == nil {
				n++
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	fn()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	sent = <-finished
	<-done
	return sent, sent - len(got)
}
