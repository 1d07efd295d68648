package software

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// kernelState renders what a namespace holds of Skiff's datapath, as seen
// by iproute2 (an observer independent of Skiff's netlink code): links
// whose name starts with "sk" or "br-", their FDB entries and their
// permanent neighbour entries, one sorted line each.
func kernelState(t *testing.T, ns string) string {
	t.Helper()
	var links []struct {
		Name     string   `json:"ifname"`
		MAC      string   `json:"address"`
		MTU      int      `json:"mtu"`
		Flags    []string `json:"flags"`
		Alias    string   `json:"ifalias"`
		Master   string   `json:"master"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
			Data struct {
				ID       int    `json:"id"`
				Local    string `json:"local"`
				Port     int    `json:"port"`
				Learning bool   `json:"learning"`
			} `json:"info_data"`
			Slave struct {
				Learning      bool `json:"learning"`
				NeighSuppress bool `json:"neigh_suppress"`
			} `json:"info_slave_data"`
		} `json:"linkinfo"`
	}
	testkit.JSON(t, ns, &links, "ip", "-j", "-d", "link", "show")
	var lines []string
	for _, l := range links {
		if !strings.HasPrefix(l.Name, "sk") && !strings.HasPrefix(l.Name, "br-") && !strings.HasPrefix(l.Name, "fv") {
			continue
		}
		s := fmt.Sprintf("link %s %s mtu %d up=%v alias=%q", l.Name, l.LinkInfo.Kind, l.MTU, slices.Contains(l.Flags, "UP"), l.Alias)
		if l.LinkInfo.Kind == "bridge" && strings.HasPrefix(l.Alias, "skiff:") {
			s += " mac " + l.MAC
		}
		if l.LinkInfo.Kind == "vxlan" {
			s += fmt.Sprintf(" vni %d local %s port %d learning=%v", l.LinkInfo.Data.ID, l.LinkInfo.Data.Local, l.LinkInfo.Data.Port, l.LinkInfo.Data.Learning)
		}
		if l.Master != "" {
			s += fmt.Sprintf(" master %s port-learning=%v neigh-suppress=%v", l.Master, l.LinkInfo.Slave.Learning, l.LinkInfo.Slave.NeighSuppress)
		}
		lines = append(lines, s)
		var fdb []struct {
			MAC    string   `json:"mac"`
			Dst    string   `json:"dst"`
			Flags  []string `json:"flags"`
			Master string   `json:"master"`
			State  string   `json:"state"`
		}
		testkit.JSON(t, ns, &fdb, "bridge", "-j", "fdb", "show", "dev", l.Name)
		for _, f := range fdb {
			if f.State == "permanent" && f.Master != "" {
				continue // the port's own address, the kernel's
			}
			if strings.HasPrefix(f.MAC, "33:33:") || strings.HasPrefix(f.MAC, "01:00:5e:") {
				continue // multicast, the kernel's
			}
			if f.Dst != "" {
				lines = append(lines, fmt.Sprintf("fdb %s %s dst %s %s", l.Name, f.MAC, f.Dst, f.State))
			} else {
				lines = append(lines, fmt.Sprintf("fdb %s %s master %s %s", l.Name, f.MAC, f.Master, f.State))
			}
		}
		var addrs []struct {
			Info []struct {
				Local  string `json:"local"`
				Prefix int    `json:"prefixlen"`
				Scope  string `json:"scope"`
			} `json:"addr_info"`
		}
		testkit.JSON(t, ns, &addrs, "ip", "-j", "addr", "show", "dev", l.Name)
		for _, a := range addrs {
			for _, i := range a.Info {
				if i.Scope != "link" {
					lines = append(lines, fmt.Sprintf("addr %s %s/%d", l.Name, i.Local, i.Prefix))
				}
			}
		}
		var neigh []struct {
			Dst   string   `json:"dst"`
			MAC   string   `json:"lladdr"`
			State []string `json:"state"`
		}
		testkit.JSON(t, ns, &neigh, "ip", "-j", "neigh", "show", "dev", l.Name)
		for _, n := range neigh {
			if slices.Contains(n.State, "PERMANENT") {
				lines = append(lines, fmt.Sprintf("neigh %s %s %s", l.Name, n.Dst, n.MAC))
			}
		}
	}
	for _, l := range strings.Split(testkit.Run(t, ns, "ip", "route", "show", "table", "all", "proto", "83"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, "route "+l)
		}
	}
	for _, l := range strings.Split(testkit.Run(t, ns, "ip", "rule", "show", "pref", "2500"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, "rule "+l)
		}
	}
	if out, err := testkit.Try(ns, "nft", "list", "table", "inet", "skiff"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); strings.HasSuffix(l, "drop") || strings.HasSuffix(l, "masquerade") || strings.HasSuffix(l, "notrack") || strings.HasPrefix(l, "type ") {
				lines = append(lines, "nft "+l)
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

var (
	vtep1 = netip.MustParseAddr("192.0.2.1")
	vtep2 = netip.MustParseAddr("192.0.2.2")
	vtep3 = netip.MustParseAddr("192.0.2.3")
)

func remote(name, network, mac, ip string, vtep netip.Addr) plan.Remote {
	return plan.Remote{Name: name, Network: network, Node: "other", VTEP: vtep, MAC: mac, IPs: []netip.Prefix{netip.MustParsePrefix(ip)}}
}

func planWith(nets []plan.Network, remotes ...plan.Remote) plan.Plan {
	p := plan.New("n1")
	p.UnderlayIP = vtep1
	for _, n := range nets {
		p.Networks[n.Name] = n
	}
	for _, r := range remotes {
		p.Remote[r.Name] = r
	}
	return p
}

var (
	blue = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{vtep2},
		Subnets: []plan.Subnet{{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	red = plan.Network{Name: "red", VNI: 200, MTU: 1400, FloodVTEPs: []netip.Addr{vtep2, vtep3}}
)

const (
	blueDevs = `addr skb100 198.51.100.1/24
link skb100 bridge mtu 1450 up=true alias="skiff:bridge:blue" mac 02:73:6b:00:00:64
link skv100 vxlan mtu 1450 up=true alias="skiff:vxlan:blue" vni 100 local 192.0.2.1 port 4789 learning=false master skb100 port-learning=false neigh-suppress=true`
	redDevs = `link skb200 bridge mtu 1400 up=true alias="skiff:bridge:red" mac 02:73:6b:00:00:c8
link skv200 vxlan mtu 1400 up=true alias="skiff:vxlan:red" vni 200 local 192.0.2.1 port 4789 learning=false master skb200 port-learning=false neigh-suppress=true`
	foreign = `link br-foreign bridge mtu 1500 up=false alias=""
link fv0 veth mtu 1500 up=false alias="" master br-foreign port-learning=true neigh-suppress=false
link fv1 veth mtu 1500 up=false alias=""
link skforeign bridge mtu 1500 up=false alias=""
fdb fv0 02:aa:00:00:00:01 master br-foreign static
rule 2500:	from all iif fv1 lookup 100`
)

// nft renders the isolation rules expected for the given bridges, of
// networks whose egress is none (the test networks'): nothing routed
// into another network's bridge, host port or (offload) gateway, out of
// the overlay or into it from outside.
func nft(bridges ...string) string {
	out := "nft type filter hook forward priority filter; policy accept;"
	for _, b := range bridges {
		out += fmt.Sprintf("\nnft iifname %q oifname \"skb*\" oifname != %q drop", b, b)
		out += fmt.Sprintf("\nnft iifname %q oifname \"skn*\" oifname != %q drop", b, b)
		out += fmt.Sprintf("\nnft iifname %q oifname \"skg*\" oifname != %q drop", b, b)
		out += fmt.Sprintf("\nnft iifname %q oifname != \"skb*\" oifname != \"skn*\" oifname != \"skg*\" drop", b)
		out += fmt.Sprintf("\nnft iifname != \"skb*\" iifname != \"skn*\" iifname != \"skg*\" oifname %q drop", b)
	}
	return out
}

func lines(parts ...string) string {
	var all []string
	for _, p := range parts {
		all = append(all, strings.Split(strings.TrimSpace(p), "\n")...)
	}
	slices.Sort(all)
	return strings.Join(all, "\n")
}

// TestApplyTransitions applies a table of plans to a real kernel (a
// throwaway namespace) and checks the exact state after each, that a second
// Apply of the same plan makes no netlink write, and that foreign objects
// (a bridge named like Skiff's but without its mark, another bridge with an
// FDB entry, a policy rule at Skiff's priority) are never touched.
func TestApplyTransitions(t *testing.T) {
	ns := testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "skforeign", "type", "bridge")
	testkit.Run(t, ns, "ip", "link", "add", "br-foreign", "type", "bridge")
	testkit.Run(t, ns, "ip", "link", "add", "fv0", "type", "veth", "peer", "name", "fv1")
	testkit.Run(t, ns, "ip", "link", "set", "fv0", "master", "br-foreign")
	testkit.Run(t, ns, "bridge", "fdb", "add", "02:aa:00:00:00:01", "dev", "fv0", "master", "static")
	testkit.Run(t, ns, "ip", "rule", "add", "pref", "2500", "iif", "fv1", "lookup", "100")
	k, dp := openIn(t, ns)
	r1 := remote("r1", "blue", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	r1moved := remote("r1", "blue", "02:00:00:00:00:01", "198.51.100.5/24", vtep3)
	r2 := remote("r2", "red", "02:00:00:00:00:02", "203.0.113.7/24", vtep3)
	blue3 := blue
	blue3.FloodVTEPs = []netip.Addr{vtep3}
	redSNAT, redRouted := red, red
	redSNAT.Egress, redRouted.Egress = plan.EgressSNAT, plan.EgressRouted
	redSNAT.HostPortVTEPs, redRouted.HostPortVTEPs = red.FloodVTEPs, red.FloodVTEPs
	// Node 3 is an offload node (no host port): its address is not
	// routed into the overlay.
	redRouted2 := redRouted
	redRouted2.HostPortVTEPs = []netip.Addr{vtep2}
	const red2 = `
fdb skv200 00:00:00:00:00:00 dst 192.0.2.2 permanent
fdb skv200 00:00:00:00:00:00 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 master skb200 static
neigh skb200 203.0.113.7 02:00:00:00:00:02`
	// The host port of a network whose egress is not none: the pair,
	// the node's address and MAC (from 192.0.2.1), the other nodes'
	// host port MACs over VXLAN, remote endpoints routed through it from
	// the node's address, other nodes routed from the bridge, no ICMPv6
	// redirect out of the bridge.
	const redHost = `
addr skn200 192.0.2.1/32
fdb sknp200 06:c8:c0:00:02:01 master skb200 static
fdb skv200 06:c8:c0:00:02:02 dst 192.0.2.2 permanent
fdb skv200 06:c8:c0:00:02:02 master skb200 static
fdb skv200 06:c8:c0:00:02:03 dst 192.0.2.3 permanent
fdb skv200 06:c8:c0:00:02:03 master skb200 static
link skn200 veth mtu 1400 up=true alias="skiff:host:red"
link sknp200 veth mtu 1400 up=true alias="skiff:host:red" master skb200 port-learning=false neigh-suppress=true
neigh skb200 192.0.2.2 06:c8:c0:00:02:02
neigh skb200 192.0.2.3 06:c8:c0:00:02:03
neigh skn200 203.0.113.7 02:00:00:00:00:02
nft iifname "skb200" oifname "skb*" oifname != "skb200" oifname != "skn200" drop
nft iifname "skb200" oifname "skn*" oifname != "skb200" oifname != "skn200" drop
nft iifname "skb200" oifname "skg*" oifname != "skb200" oifname != "skn200" drop
nft iifname "skn200" oifname "skb*" oifname != "skb200" oifname != "skn200" drop
nft iifname "skn200" oifname "skn*" oifname != "skb200" oifname != "skn200" drop
nft iifname "skn200" oifname "skg*" oifname != "skb200" oifname != "skn200" drop
nft type filter hook prerouting priority raw; policy accept;
nft iifname "skb200" @ll,0,48 0x6c8c0000201 notrack
nft iifname "skb200" @ll,48,48 0x6c8c0000201 notrack
nft type filter hook output priority filter; policy accept;
nft oifname "skb200" icmpv6 type nd-redirect drop
route 192.0.2.2 dev skb200 table 1392509128 scope link
route 192.0.2.3 dev skb200 table 1392509128 scope link
route 203.0.113.7 dev skn200 scope link src 192.0.2.1
rule 2500:	from all iif skb200 lookup 1392509128 proto 83`
	steps := []struct {
		name string
		plan plan.Plan
		want string
	}{
		{"empty plan", planWith(nil), lines(foreign)},
		{"network with a remote endpoint", planWith([]plan.Network{blue}, r1), lines(foreign, blueDevs, nft("skb100"), `
fdb skv100 00:00:00:00:00:00 dst 192.0.2.2 permanent
fdb skv100 02:00:00:00:00:01 dst 192.0.2.2 permanent
fdb skv100 02:00:00:00:00:01 master skb100 static
neigh skb100 198.51.100.5 02:00:00:00:00:01`)},
		{"endpoint moves to another node", planWith([]plan.Network{blue3}, r1moved), lines(foreign, blueDevs, nft("skb100"), `
fdb skv100 00:00:00:00:00:00 dst 192.0.2.3 permanent
fdb skv100 02:00:00:00:00:01 dst 192.0.2.3 permanent
fdb skv100 02:00:00:00:00:01 master skb100 static
neigh skb100 198.51.100.5 02:00:00:00:00:01`)},
		{"second network", planWith([]plan.Network{blue3, red}, r1moved, r2), lines(foreign, blueDevs, redDevs, nft("skb100", "skb200"), `
fdb skv100 00:00:00:00:00:00 dst 192.0.2.3 permanent
fdb skv100 02:00:00:00:00:01 dst 192.0.2.3 permanent
fdb skv100 02:00:00:00:00:01 master skb100 static
neigh skb100 198.51.100.5 02:00:00:00:00:01
fdb skv200 00:00:00:00:00:00 dst 192.0.2.2 permanent
fdb skv200 00:00:00:00:00:00 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 master skb200 static
neigh skb200 203.0.113.7 02:00:00:00:00:02`)},
		{"first network deleted", planWith([]plan.Network{red}, r2), lines(foreign, redDevs, nft("skb200"), `
fdb skv200 00:00:00:00:00:00 dst 192.0.2.2 permanent
fdb skv200 00:00:00:00:00:00 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 dst 192.0.2.3 permanent
fdb skv200 02:00:00:00:00:02 master skb200 static
neigh skb200 203.0.113.7 02:00:00:00:00:02`)},
		{"egress snat: masqueraded out, a host port", planWith([]plan.Network{redSNAT}, r2), lines(foreign, redDevs, red2, redHost, `
nft type filter hook forward priority filter; policy accept;
nft type nat hook postrouting priority srcnat; policy accept;
nft iifname "skb200" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade
nft iifname "skn200" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade`)},
		{"egress routed: out and in as they are, a host port", planWith([]plan.Network{redRouted}, r2), lines(foreign, redDevs, red2, redHost, `
nft type filter hook forward priority filter; policy accept;`)},
		{"routed, node 3 without a host port", planWith([]plan.Network{redRouted2}, r2), lines(foreign, redDevs, red2, without(redHost,
			"fdb skv200 06:c8:c0:00:02:03 dst 192.0.2.3 permanent",
			"fdb skv200 06:c8:c0:00:02:03 master skb200 static",
			"neigh skb200 192.0.2.3 06:c8:c0:00:02:03",
			"route 192.0.2.3 dev skb200 table 1392509128 scope link"), `
nft type filter hook forward priority filter; policy accept;`)},
		{"egress none again: no host port", planWith([]plan.Network{red}, r2), lines(foreign, redDevs, red2, nft("skb200"))},
		{"everything deleted", planWith(nil), lines(foreign)},
	}
	for _, s := range steps {
		if err := dp.Apply(s.plan); err != nil {
			t.Fatalf("%s: apply: %v", s.name, err)
		}
		if got := kernelState(t, ns); got != s.want {
			t.Fatalf("%s: kernel holds\n%s\nwant\n%s", s.name, got, s.want)
		}
		w := k.Writes()
		if err := dp.Apply(s.plan); err != nil {
			t.Fatalf("%s: second apply: %v", s.name, err)
		}
		if n := k.Writes() - w; n != 0 {
			t.Fatalf("%s: applying the same plan again made %d writes (netlink, nftables, sysctls), want 0", s.name, n)
		}
	}
}

// TestApplyRepairsDrift deletes Skiff's objects behind its back and checks
// that the next Apply restores exactly the planned state.
func TestApplyRepairsDrift(t *testing.T) {
	ns := testkit.New(t)
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	dp := New(Options{Kernel: k})
	p := planWith([]plan.Network{blue}, remote("r1", "blue", "02:00:00:00:00:01", "198.51.100.5/24", vtep2))
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	want := kernelState(t, ns)
	for _, drift := range [][]string{
		{"ip", "link", "del", "skv100"},
		{"bridge", "fdb", "del", "02:00:00:00:00:01", "dev", "skv100", "dst", "192.0.2.2", "self"},
		{"ip", "neigh", "del", "198.51.100.5", "dev", "skb100"},
		{"ip", "link", "set", "skb100", "mtu", "1300"},
		{"bridge", "fdb", "append", "02:00:00:00:00:99", "dev", "skv100", "dst", "192.0.2.9", "self", "permanent"},
	} {
		testkit.Run(t, ns, drift...)
		if err := dp.Apply(p); err != nil {
			t.Fatalf("after %v: %v", drift, err)
		}
		if got := kernelState(t, ns); got != want {
			t.Fatalf("after %v the kernel holds\n%s\nwant\n%s", drift, got, want)
		}
	}
}

func TestApplyRefusesForeignNameClash(t *testing.T) {
	ns := testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "skb100", "type", "veth", "peer", "name", "fpeer")
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	err = New(Options{Kernel: k}).Apply(planWith([]plan.Network{blue}))
	if err == nil || !strings.Contains(err.Error(), "skb100 exists and is not Skiff's") {
		t.Fatalf("apply over a foreign skb100: %v", err)
	}
	if out := testkit.Run(t, ns, "ip", "-d", "link", "show", "skb100"); !strings.Contains(out, "veth") || strings.Contains(out, "skiff") {
		t.Fatalf("the foreign skb100 was changed: %s", out)
	}
}

// without is text's lines less the lines given (each must be there).
func without(text string, drop ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if !slices.Contains(drop, l) {
			out = append(out, l)
		}
	}
	if len(out) != len(strings.Split(text, "\n"))-len(drop) {
		panic("without: a line to drop is not in the text")
	}
	return strings.Join(out, "\n")
}
