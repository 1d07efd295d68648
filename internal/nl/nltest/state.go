package nltest

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// State is the namespace as text a person can read and a test can
// compare: one line per object, each starting with what it is, sorted,
// links named by name (never by index), so that the same state prints
// the same text every run and a one-rule change is one line of a diff.
//
//	link skb100 bridge mtu 1450 up alias skiff:bridge:100
//	link skv100 vxlan mtu 1450 up vni 100 local 192.0.2.1 dstport 4789 master skb100 learning off neigh_suppress on hairpin off
//	addr skb100 10.0.0.1/24
//	fdb skv100 00:00:00:00:00:00 dst 192.0.2.2 self permanent
//	neigh skb100 10.0.0.5 lladdr 02:00:00:00:00:05
//	route 10.9.0.0/16 via 192.0.2.254 dev eth0 table 100
//	rule pref 100 iif skb100 lookup 100
//	sysctl net/ipv4/ip_forward = 1
//	table inet skiff
//	  set pods4 ipv4_addr
//	    10.0.0.5
//	  chain forward type filter hook forward priority 0; policy accept;
//	    iifname "skb100" counter drop  # isolate:100
//	qdisc skr0 clsact
//	filter skr0 ingress chain 3 prio 21249 protocol all handle 0x1 flower skip_sw in_hw dst_mac 02:00:00:00:00:0a action mirred egress redirect dev skvx cookie 736b...
//	devlink pci/0000:03:00.0 eswitch switchdev
//	vf enp3s0f0 0 mac 02:00:00:00:01:00 vlan 0 qos 0 spoofchk off trust off state auto rate 0-0
//
// Left out: what the kernel makes by itself (lo's addresses, the bridge
// entry of a port's own MAC, root qdiscs, dynamic neighbours), routes
// and rules that are not Skiff's (protocol 83), sysctls at their
// defaults, MACs nobody gave, counters.
func (n *NS) State() string {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	name := func(i int) string {
		if l := n.links[i]; l != nil {
			return l.Name
		}
		return fmt.Sprintf("if%d", i)
	}
	ls := n.sorted()
	slices.SortFunc(ls, func(a, b *link) int { return cmp.Compare(a.Name, b.Name) })
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, l := range ls {
		add("%s", n.linkLine(l, name))
	}
	for _, l := range ls {
		addrs := slices.Clone(l.addrs)
		slices.SortFunc(addrs, func(a, b netip.Prefix) int { return cmp.Or(a.Addr().Compare(b.Addr()), a.Bits()-b.Bits()) })
		for _, a := range addrs {
			if !l.loop {
				add("addr %s %s", l.Name, a)
			}
		}
	}
	out = append(out, vlanLines(ls)...)
	out = append(out, n.fdbLines(ls)...)
	for _, l := range ls {
		var ips []netip.Addr
		for ip, e := range l.neighs {
			if e.state == nudPermanent {
				ips = append(ips, ip)
			}
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		for _, ip := range ips {
			add("neigh %s %s lladdr %s", l.Name, ip, l.neighs[ip].mac)
		}
	}
	out = append(out, n.routeLines(name)...)
	out = append(out, n.sysctlLines(ls)...)
	tables := slices.Clone(n.tables)
	slices.SortFunc(tables, func(a, b *table) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.family, b.family)) })
	for _, t := range tables {
		out = append(out, t.lines()...)
	}
	for _, l := range ls {
		if l.qdisc != "" {
			add("qdisc %s %s", l.Name, l.qdisc)
		}
		for i, b := range l.blocks {
			if b == nil {
				continue
			}
			fs, _ := b.dump(0, true)
			slices.SortStableFunc(fs, func(x, y *tcFilter) int { return cmp.Compare(x.f.Chain, y.f.Chain) })
			for _, f := range fs {
				add("filter %s %s %s", l.Name, []string{"ingress", "egress"}[i], f.f.Format(name))
			}
		}
	}
	var devs []string
	for d := range n.devlink {
		devs = append(devs, d)
	}
	slices.Sort(devs)
	for _, d := range devs {
		if m := n.devlink[d]; m != "" {
			add("devlink %s eswitch %s", d, m)
		} else {
			add("devlink %s", d)
		}
	}
	for _, l := range ls {
		for _, v := range l.vfs {
			state := map[uint32]string{unix.IFLA_VF_LINK_STATE_AUTO: "auto", unix.IFLA_VF_LINK_STATE_ENABLE: "enable", unix.IFLA_VF_LINK_STATE_DISABLE: "disable"}[v.LinkState]
			add("vf %s %d mac %s vlan %d qos %d spoofchk %s trust %s state %s rate %d-%d", l.Name, v.ID, v.Mac, v.Vlan, v.Qos,
				onOff(v.Spoofchk), onOff(v.Trust != 0), state, v.MinTxRate, v.MaxTxRate)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (n *NS) linkLine(l *link, name func(int) string) string {
	s := fmt.Sprintf("link %s %s mtu %d", l.Name, l.Kind, l.MTU)
	if l.Up {
		s += " up"
	} else {
		s += " down"
	}
	if l.macSet {
		s += " mac " + l.MAC
	}
	if l.Alias != "" {
		s += " alias " + l.Alias
	}
	if l.peer != nil {
		s += " peer " + l.peer.Name
		if l.peer.ns != n {
			s += " in " + nsName(l.peer.ns.path)
		}
	}
	if l.Kind == "vxlan" {
		if l.External {
			s += " external"
		} else {
			s += fmt.Sprintf(" vni %d local %s", l.VNI, l.Local)
		}
		s += fmt.Sprintf(" dstport %d", l.Port)
	}
	if l.Kind == "vlan" {
		s += fmt.Sprintf(" id %d on %s", l.VID, name(l.Parent))
	}
	if l.SwitchID != "" {
		s += " switchid " + l.SwitchID
	}
	if l.hw {
		s += " hw-tc"
	}
	if l.owner != [2]uint32{} {
		s += fmt.Sprintf(" owner %d group %d", l.owner[0], l.owner[1])
	}
	if l.vlanOn {
		s += " vlan_filtering"
	}
	if l.Master != 0 {
		s += fmt.Sprintf(" master %s learning %s neigh_suppress %s hairpin %s", name(l.Master),
			onOff(l.flags.Learning), onOff(l.flags.NeighSuppress), onOff(l.flags.Hairpin))
		// The VLAN-aware bridge's flags, when not the kernel's defaults.
		if !l.bport.Flood {
			s += " flood off"
		}
		if l.bport.Isolated {
			s += " isolated on"
		}
		if l.bport.VLANTunnel {
			s += " vlan_tunnel on"
		}
	}
	return s
}

// vlanLines are the bridge ports' VLANs:
//
//	vlan pf0vf0 2 access
//	vlan skvx 2 tunnel 100
func vlanLines(ls []*link) []string {
	var out []string
	for _, l := range ls {
		for _, v := range l.vlans {
			s := fmt.Sprintf("vlan %s %d", l.Name, v.VID)
			if v.Access {
				s += " access"
			}
			if v.TunnelID != 0 {
				s += fmt.Sprintf(" tunnel %d", v.TunnelID)
			}
			out = append(out, s)
		}
	}
	return out
}

func (n *NS) fdbLines(ls []*link) []string {
	var out []string
	for _, l := range ls {
		var es []string
		br := n.links[l.Master]
		if l.Kind == "bridge" {
			br = l // its own entries
		}
		if br != nil {
			for k, e := range br.fdb {
				if e.port != l || e.kernel {
					continue
				}
				state := "dynamic"
				if e.permanent {
					state = "permanent"
				} else if e.static {
					state = "static"
				}
				s := fmt.Sprintf("fdb %s %s master %s", l.Name, k.mac, state)
				if k.vlan != 0 {
					s += fmt.Sprintf(" vlan %d", k.vlan)
				}
				es = append(es, s)
			}
		}
		for _, e := range l.self {
			for i, d := range e.dsts {
				s := fmt.Sprintf("fdb %s %s dst %s self permanent", l.Name, e.mac, d)
				if e.static {
					s += " static"
				}
				if e.vnis[i] != 0 {
					s += fmt.Sprintf(" vni %d", e.vnis[i])
				}
				if e.srcVNI != 0 {
					s += fmt.Sprintf(" src_vni %d", e.srcVNI)
				}
				es = append(es, s)
			}
		}
		slices.Sort(es)
		out = append(out, es...)
	}
	return out
}

func (n *NS) routeLines(name func(int) string) []string {
	var rs []nl.Route
	for _, r := range n.routes {
		if r.Protocol == nl.RouteProtocol {
			rs = append(rs, r)
		}
	}
	sortRoutes(rs)
	var out []string
	for _, r := range rs {
		s := "route " + r.Dst.String()
		if r.Gw.IsValid() {
			s += " via " + r.Gw.String()
		}
		s += " dev " + name(r.LinkIndex)
		if r.Src.IsValid() {
			s += " src " + r.Src.String()
		}
		if r.Table != 0 {
			s += fmt.Sprintf(" table %d", r.Table)
		}
		out = append(out, s)
	}
	rules := slices.Clone(n.rules)
	slices.SortFunc(rules, func(a, b nl.Rule) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.IIF, b.IIF), cmp.Compare(a.Table, b.Table), boolCmp(a.IPv6, b.IPv6))
	})
	for _, r := range rules {
		fam := ""
		if r.IPv6 {
			fam = "-6 "
		}
		out = append(out, fmt.Sprintf("rule %spref %d iif %s lookup %d", fam, r.Priority, r.IIF, r.Table))
	}
	return out
}

func boolCmp(a, b bool) int {
	if a == b {
		return 0
	}
	if a {
		return 1
	}
	return -1
}

// sysctlLines are the sysctls that differ from their defaults: a
// namespace's forwarding from "0" (its default for new links from its
// all, which sets it), a link's from the namespace's default for new
// links, br_netfilter's from "1"; the ones a test defined, all.
func (n *NS) sysctlLines(ls []*link) []string {
	var out []string
	for _, k := range [][2]string{{sysV4All, sysV4Forward}, {sysV6All, sysV6All}} {
		if v := n.sys[k[0]]; v != "0" {
			out = append(out, fmt.Sprintf("sysctl %s = %s", k[1], v))
		}
	}
	for _, k := range [][2]string{{sysV4Default, sysV4All}, {sysV6Default, sysV6All}} {
		if v := n.sys[k[0]]; v != n.sys[k[1]] {
			out = append(out, fmt.Sprintf("sysctl %s = %s", k[0], v))
		}
	}
	for _, l := range ls {
		for fam, p := range []string{"net/ipv4/conf/", "net/ipv6/conf/"} {
			if def := n.sys[[]string{sysV4Default, sysV6Default}[fam]]; l.fwd[fam] != def {
				out = append(out, fmt.Sprintf("sysctl %s%s/forwarding = %s", p, l.Name, l.fwd[fam]))
			}
		}
	}
	var extra []string
	for k, v := range n.bridge {
		if v != "1" {
			extra = append(extra, fmt.Sprintf("sysctl %s = %s", k, v))
		}
	}
	for k, v := range n.extra {
		extra = append(extra, fmt.Sprintf("sysctl %s = %s", k, v))
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// lines list a table as nft would, one object a line (a dynamic set's
// elements without the time they have left).
func (t *table) lines() []string {
	head := "table " + t.family.String() + " " + t.name
	if t.foreign {
		head += " (foreign)"
	}
	out := []string{head}
	for i, s := range t.sets {
		typ := "ipv4_addr"
		if s.IPv6 {
			typ = "ipv6_addr"
		}
		if s.Dynamic() {
			typ = strings.TrimSuffix(strings.TrimPrefix(s.Decl(), "type "), ";")
		}
		out = append(out, fmt.Sprintf("  set %s %s", s.Name, typ))
		var es []netip.Addr
		for a := range t.elems[i] {
			es = append(es, a)
		}
		slices.SortFunc(es, netip.Addr.Compare)
		for _, a := range es {
			out = append(out, "    "+a.String())
		}
		var ps []string
		for p := range t.pairs[i] {
			ps = append(ps, "    "+p.ifname+" . "+p.mac)
		}
		slices.Sort(ps)
		out = append(out, ps...)
	}
	for _, c := range t.chains {
		out = append(out, strings.TrimRight("  chain "+c.Name+" "+c.Header(), " "))
		for _, r := range c.Rules {
			s := "    " + r.String()
			if r.Tag != "" && !t.foreign {
				// A tag may hold what does not print (Skiff's
				// counter tags separate their parts with NUL).
				s += "  # " + strings.Trim(strconv.QuoteToGraphic(r.Tag), `"`)
			}
			out = append(out, s)
		}
	}
	return out
}

// nsName names a namespace in State: its path, "host" for the host's.
func nsName(path string) string {
	if path == "" {
		return "host"
	}
	return path
}
