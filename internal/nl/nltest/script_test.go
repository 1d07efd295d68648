package nltest_test

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The conformance script's nftables and sysctl parts.

func nftTable(elems ...string) nl.NftTable {
	var as []netip.Addr
	for _, e := range elems {
		as = append(as, netip.MustParseAddr(e))
	}
	return nl.NftTable{Name: "sktest",
		Sets: []nl.NftSet{{Name: "pods4", Elems: as}, {Name: "pods6", IPv6: true}},
		Chains: []nl.NftChain{
			{Name: "forward", Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter, Rules: []nl.NftRule{
				{Tag: "established", Match: []nl.NftMatch{nl.CtState{Established: true, Related: true}}, Action: nl.Accept{}},
				{Tag: "isolate", Match: []nl.NftMatch{nl.IfName{Name: "skb0"}, nl.IfName{Out: true, Prefix: true, Name: "skb", Not: true}}, Counter: true, Action: nl.Drop{}},
				{Tag: "pods", Match: []nl.NftMatch{nl.Family{}, nl.AddrIn{Dst: true, Set: "pods4"}}, Counter: true, Action: nl.Jump{Chain: "pods"}},
			}},
			{Name: "pods", Rules: []nl.NftRule{
				{Tag: "dns", Match: []nl.NftMatch{nl.L4Proto{Proto: unix.IPPROTO_UDP}, nl.DPort{From: 53}}, Action: nl.Accept{}},
				{Tag: "mark", Match: []nl.NftMatch{nl.Family{}, nl.Addr{Prefix: netip.MustParsePrefix("10.1.0.0/16")}}, Action: nl.OrMark{Mark: 0x100}},
			}},
			{Name: "nat", Hook: nl.HookPostrouting, Type: nl.ChainNAT, Priority: nl.PrioritySrcNAT, Rules: []nl.NftRule{
				{Tag: "snat", Match: []nl.NftMatch{nl.Family{}, nl.Addr{Prefix: netip.MustParsePrefix("10.1.0.0/16")}, nl.IfName{Out: true, Name: "skb0", Not: true}}, Counter: true, Action: nl.Masquerade{}},
			}},
		}}
}

func nftScript(o *observer, k nl.Kernel) {
	change := func(what string, t nl.NftTable) {
		c, err := k.SetTable(t)
		o.add("nft %s: %+v %s", what, c, errClass(err))
	}
	change("create", nftTable("10.1.0.5", "10.1.0.6"))
	change("again", nftTable("10.1.0.6", "10.1.0.5"))
	change("elements", nftTable("10.1.0.6", "10.1.0.7", "10.1.0.8", "2001:db8::1"))
	t := nftTable("10.1.0.6")
	t.Chains[0].Rules[0].Tag = "established2"
	change("rule changed", t)
	t.Chains[1].Drop = true
	change("regular chain drop", t)
	t.Chains[0].Drop = true
	change("policy", t)
	bad := nftTable()
	bad.Chains[0].Rules = append(bad.Chains[0].Rules, nl.NftRule{Action: nl.Jump{Chain: "nosuch"}})
	change("jump to missing", bad)
	bad = nftTable()
	bad.Chains[0].Rules = append(bad.Chains[0].Rules, nl.NftRule{Match: []nl.NftMatch{nl.AddrIn{Set: "nosuch"}}})
	change("lookup in missing", bad)
	change("other", nl.NftTable{Name: "skother", Chains: []nl.NftChain{{Name: "c"}}})
	change("delete other", nl.NftTable{Name: "skother"})
	change("delete absent", nl.NftTable{Name: "skother"})
}

func sysctlScript(o *observer, k nl.Kernel) {
	get := func(name string) {
		v, err := k.Sysctl(name)
		o.add("sysctl %s = %q %s", name, v, errClass(err))
	}
	set := func(name, v string) { o.step("set sysctl "+name+"="+v, k.SetSysctl(name, v)) }
	get("net/ipv4/ip_forward")
	set("net/ipv4/ip_forward", "1")
	get("net/ipv4/conf/skp1/forwarding")
	set("net/ipv4/conf/skp1/forwarding", "0")
	set("net/ipv6/conf/default/forwarding", "1")
	set("net/ipv6/conf/all/forwarding", "1")
	set("net/ipv6/conf/skp0/forwarding", "0")
	set("net/ipv4/conf/default/forwarding", "0")
	o.step("add pair late", k.AddPair(nl.Pair{Name: "sks0", Peer: "sks1"}))
	get("net/ipv4/conf/sks0/forwarding")
	get("net/ipv6/conf/sks0/forwarding")
	get("net/ipv4/nosuch")
	set("net/ipv4/nosuch", "1")
	get("net/ipv4/conf/nosuch/forwarding")
	set("net/ipv4/ip_forward", "x")
	// br_netfilter: a kernel that has it built in has its sysctls
	// whether or not LoadModule can load it.
	err := k.LoadModule("br_netfilter")
	if _, serr := k.Sysctl("net/bridge/bridge-nf-call-iptables"); serr == nil {
		err = nil
	}
	o.step("load br_netfilter", err)
	get("net/bridge/bridge-nf-call-iptables")
	set("net/bridge/bridge-nf-call-ip6tables", "0")
	get("net/bridge/bridge-nf-call-ip6tables")
	set("net/bridge/bridge-nf-call-ip6tables", "1")
}
