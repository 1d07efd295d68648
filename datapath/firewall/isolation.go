package firewall

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// Tables and chains the firewall writes.
const (
	// IsolationTable holds isolation and egress (Isolation).
	IsolationTable = "skiff"
	// Chains of IsolationTable: IsolationChain (forward) drops what is routed
	// between networks, EgressChain (nat postrouting) masquerades snat
	// networks' traffic, UntrackChain (raw prerouting) keeps host port
	// frames on a bridge from conntrack, ReplyChain (mangle
	// postrouting) marks replies, NoRedirectChain (output) keeps ICMPv6
	// redirects from the pods.
	IsolationChain  = "isolate"
	EgressChain     = "egress"
	UntrackChain    = "untrack"
	ReplyChain      = "replies"
	NoRedirectChain = "noredirect"
)

// Device is a device through which a network on this node meets the
// node's stack, with its network's egress ("none" (or ""), "snat" or
// "routed") and the node's host port on that network ("" when it has
// none): the host port counts as the network's own, like the device.
// Name is the network's bridge (skb<VNI>) on a software node, its
// gateway (skg<VNI>, the node's end of the gateway's veth pair) on an
// offload node.
type Device struct {
	Name, Egress string
	HostPort     string
	// HostMAC is the host port's MAC: frames from and to it are not
	// tracked by conntrack on their way through the bridge.
	HostMAC string
	// ReplyMark, when not 0, is or'ed into the mark of what leaves
	// through Name on a connection conntrack holds established or
	// related (ReplyChain): an offload node's gateway port lets such
	// packets past the network's zone (offload/flower ReplyMark).
	ReplyMark uint32
}

// L3Prefixes are the name prefixes of the devices routed traffic may use
// to enter or leave a network: its bridge and the node's host port
// (software nodes), its gateway (offload nodes).
var L3Prefixes = []string{"skb", "skn", "skg"}

// notSkiff matches an interface (output when out) that is none of
// Skiff's network devices: outside the overlay.
func notSkiff(out bool) []nl.NftMatch {
	var m []nl.NftMatch
	for _, p := range L3Prefixes {
		m = append(m, nl.IfName{Out: out, Prefix: true, Not: true, Name: p})
	}
	return m
}

func in(name string) nl.NftMatch  { return nl.IfName{Name: name} }
func out(name string) nl.NftMatch { return nl.IfName{Out: true, Name: name} }

// Isolation is the table (IsolationTable) that keeps tenant networks apart on a
// node that forwards: what is routed from one of devs (bridges or
// gateways, and host ports) into another network's device ("skb", "skn"
// and "skg" prefixes) is dropped; bridged traffic inside one network is
// untouched. A device's egress decides what it may route out of the
// overlay (to any interface that is not a Skiff bridge, host port or
// gateway): nothing for "none" (dropped, and nothing is routed into it
// from outside either), everything for "routed", and everything
// masqueraded to the outgoing interface's address for "snat". ICMPv6
// redirects leaving a device with a host port are dropped: the gateway
// stays its pods' first hop. No device: no table.
func Isolation(devs []Device) nl.NftTable {
	devs = slices.SortedFunc(slices.Values(devs), func(a, b Device) int { return cmp.Compare(a.Name, b.Name) })
	var isolate, egress, untrack, replies, noredirect []nl.NftRule
	for _, d := range devs {
		own := []string{d.Name}
		if d.HostPort != "" {
			own = append(own, d.HostPort)
		}
		var notOwn []nl.NftMatch
		for _, o := range own {
			notOwn = append(notOwn, nl.IfName{Out: true, Not: true, Name: o})
		}
		for _, from := range own {
			// Into another network's bridge, host port or gateway.
			for _, p := range L3Prefixes {
				isolate = append(isolate, nl.NftRule{Tag: "x:" + from + ">" + p + "!" + strings.Join(own, ","),
					Match: append([]nl.NftMatch{in(from), nl.IfName{Out: true, Prefix: true, Name: p}}, notOwn...), Action: nl.Drop{}})
			}
		}
		if d.HostPort != "" && d.HostMAC != "" {
			// A packet routed out of the host port comes back into the
			// bridge through its peer, and a pod's reply to the host
			// goes through the bridge before the host port: with
			// br_netfilter, conntrack would see each twice, and the
			// second entry of a translated connection (a Service's
			// DNAT, a NodePort's masquerade) clashes with the first
			// and is dropped. Their bridge pass is not tracked; the
			// routed pass is.
			for _, dst := range []bool{true, false} {
				dir := "src"
				if dst {
					dir = "dst"
				}
				untrack = append(untrack, nl.NftRule{Tag: "untrack:" + dir + ":" + d.Name + ":" + d.HostMAC,
					Match: []nl.NftMatch{in(d.Name), nl.Ether{Dst: dst, MAC: d.HostMAC}}, Action: nl.Notrack{}})
			}
		}
		if d.ReplyMark != 0 {
			replies = append(replies, nl.NftRule{Tag: fmt.Sprintf("reply:%s:%#x", d.Name, d.ReplyMark),
				Match:  []nl.NftMatch{out(d.Name), nl.CtState{Established: true, Related: true}},
				Action: nl.OrMark{Mark: d.ReplyMark}})
		}
		if d.HostPort != "" {
			// The node routes what a pod sends to another node's host
			// port (its VTEP or host address) back out of the device
			// it came in by, and IPv6 then redirects the pod to that
			// host port's MAC (the destination is on-link; a TCP
			// socket takes the advice without checking its first
			// hop): the pod would send to it past the node's stack
			// (its egress policy), and on an offload node to a MAC
			// its representor has no rule for. The gateway stays the
			// pods' first hop. (IPv4 redirects name the node's
			// underlay address, which is not on the pods' link, and
			// are ignored.)
			noredirect = append(noredirect, nl.NftRule{Tag: "noredirect:" + d.Name,
				Match: []nl.NftMatch{out(d.Name), nl.ICMPv6Type{From: 137}}, Action: nl.Drop{}})
		}
		switch d.Egress {
		case "", "none":
			// Out of the overlay, and into it from outside.
			isolate = append(isolate,
				nl.NftRule{Tag: "none:" + d.Name, Match: append([]nl.NftMatch{in(d.Name)}, notSkiff(true)...), Action: nl.Drop{}},
				nl.NftRule{Tag: "in:" + d.Name, Match: append(notSkiff(false), out(d.Name)), Action: nl.Drop{}})
		case "snat":
			for _, from := range own {
				egress = append(egress, nl.NftRule{Tag: "snat:" + from, Match: append([]nl.NftMatch{in(from)}, notSkiff(true)...), Action: nl.Masquerade{}})
			}
		}
	}
	t := nl.NftTable{Name: IsolationTable}
	if len(devs) == 0 {
		return t
	}
	t.Chains = append(t.Chains, nl.NftChain{Name: IsolationChain, Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter, Rules: isolate})
	for _, c := range []nl.NftChain{
		{Name: EgressChain, Hook: nl.HookPostrouting, Type: nl.ChainNAT, Priority: nl.PrioritySrcNAT, Rules: egress},
		{Name: UntrackChain, Hook: nl.HookPrerouting, Type: nl.ChainFilter, Priority: nl.PriorityRaw, Rules: untrack},
		{Name: ReplyChain, Hook: nl.HookPostrouting, Type: nl.ChainFilter, Priority: nl.PriorityMangle, Rules: replies},
		{Name: NoRedirectChain, Hook: nl.HookOutput, Type: nl.ChainFilter, Priority: nl.PriorityFilter, Rules: noredirect},
	} {
		if len(c.Rules) > 0 {
			t.Chains = append(t.Chains, c)
		}
	}
	return t
}
