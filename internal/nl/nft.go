package nl

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Firewall owns Skiff's nftables table ("inet skiff"). Nothing else in
// nftables is read or changed.
type Firewall struct {
	ns   netns.NsHandle
	path string // of the namespace; "" for the caller's
	// mu guards the write counts, which metrics read while the
	// datapath writes.
	mu     sync.Mutex
	writes int
	policy PolicyWrites
}

// NftTable and NftIsolationChain name what the Firewall owns.
const (
	NftTable          = "skiff"
	NftIsolationChain = "isolate"
)

// OpenFirewall returns the firewall of a namespace (empty: the caller's).
func OpenFirewall(o Options) (*Firewall, error) {
	f := &Firewall{ns: -1, path: o.NetNS}
	if o.NetNS != "" {
		h, err := netns.GetFromPath(o.NetNS)
		if err != nil {
			return nil, fmt.Errorf("nl: firewall namespace %s: %w", o.NetNS, err)
		}
		f.ns = h
	}
	return f, nil
}

func (f *Firewall) conn() (*nftables.Conn, error) {
	if f.ns >= 0 {
		return nftables.New(nftables.WithNetNSFd(int(f.ns)))
	}
	return nftables.New()
}

// Writes returns how many transactions changed the table.
func (f *Firewall) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

// BridgeEgress is the device through which a network on this node
// meets the node's stack, its network's egress ("none" (or ""), "snat"
// or "routed") and the node's host port on that network ("" when it has
// none): the host port counts as the network's own, like the device.
// Name is the network's bridge (skb<VNI>) on a software node, its
// gateway (skg<VNI>, the node's end of the gateway's veth pair) on an
// offload node.
type BridgeEgress struct {
	Name, Egress string
	HostPort     string
	// HostMAC is the host port's MAC: frames from and to it are not
	// tracked by conntrack on their way through the bridge (see
	// SetIsolation).
	HostMAC string
	// ReplyMark, when not 0, is or'ed into the mark of what leaves
	// through Name on a connection conntrack holds established or
	// related (chain NftReplyChain): an offload node's gateway port
	// lets such packets past the network's zone (offload/flower
	// ReplyMark).
	ReplyMark uint32
}

// NftEgressChain is the nat chain of the networks whose egress is snat,
// NftUntrackChain the raw chain of the host ports' frames,
// NftNoRedirectChain the output chain that keeps ICMPv6 redirects from
// the pods of networks with a host port, NftReplyChain the postrouting
// chain of the reply mark.
const (
	NftEgressChain     = "egress"
	NftUntrackChain    = "untrack"
	NftNoRedirectChain = "noredirect"
	// NftReplyChain marks what leaves a device on a connection the node
	// let through (BridgeEgress.ReplyMark), at postrouting.
	NftReplyChain = "replies"
)

// Prefixes of the devices routed traffic may use to enter or leave a
// network: its bridge and the node's host port (software nodes), its
// gateway (offload nodes).
var skiffL3Prefixes = []string{"skb", "skn", "skg"}

// notSkiff matches an interface (key) that is none of Skiff's network
// devices: outside the overlay.
func notSkiff(key expr.MetaKey) []expr.Any {
	var out []expr.Any
	for _, p := range skiffL3Prefixes {
		out = append(out, ifPrefix(key, p, true)...)
	}
	return out
}

type nftRule struct {
	data  string // the rule's user data: what it is
	chain string // NftIsolationChain, NftEgressChain or NftUntrackChain
	exprs []expr.Any
}

func ifEq(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)}}
}

func ifNe(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(name)}}
}

// ifPrefix matches (or, with neq, does not match) a name prefix: the
// comparison covers only the prefix's bytes.
func ifPrefix(key expr.MetaKey, prefix string, neq bool) []expr.Any {
	op := expr.CmpOpEq
	if neq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte(prefix)}}
}

func isolationRules(bridges []BridgeEgress) []nftRule {
	var out []nftRule
	cat := func(parts ...[]expr.Any) []expr.Any {
		var x []expr.Any
		for _, p := range parts {
			x = append(x, p...)
		}
		return x
	}
	drop := []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	for _, b := range bridges {
		own := []string{b.Name}
		if b.HostPort != "" {
			own = append(own, b.HostPort)
		}
		var notOwn []expr.Any
		for _, o := range own {
			notOwn = append(notOwn, ifNe(expr.MetaKeyOIFNAME, o)...)
		}
		for _, from := range own {
			// Into another network's bridge or host port.
			for _, p := range skiffL3Prefixes {
				out = append(out, nftRule{data: "x:" + from + ">" + p + "!" + strings.Join(own, ","),
					exprs: cat(ifEq(expr.MetaKeyIIFNAME, from), ifPrefix(expr.MetaKeyOIFNAME, p, false), notOwn, drop)})
			}
		}
		if mac, err := net.ParseMAC(b.HostMAC); err == nil && b.HostPort != "" {
			// A packet routed out of the host port comes back into the
			// bridge through its peer, and a pod's reply to the host
			// goes through the bridge before the host port: with
			// br_netfilter, conntrack would see each twice, and the
			// second entry of a translated connection (a Service's
			// DNAT, a NodePort's masquerade) clashes with the first
			// and is dropped. Their bridge pass is not tracked; the
			// routed pass is.
			for _, x := range []struct {
				dir    string
				offset uint32
			}{{"dst", 0}, {"src", 6}} {
				out = append(out, nftRule{data: "untrack:" + x.dir + ":" + b.Name + ":" + b.HostMAC, chain: NftUntrackChain,
					exprs: cat(ifEq(expr.MetaKeyIIFNAME, b.Name), []expr.Any{
						&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: x.offset, Len: 6},
						&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mac},
						&expr.Notrack{}})})
			}
		}
		if b.ReplyMark != 0 {
			out = append(out, nftRule{data: fmt.Sprintf("reply:%s:%#x", b.Name, b.ReplyMark), chain: NftReplyChain,
				exprs: cat(ifEq(expr.MetaKeyOIFNAME, b.Name), []expr.Any{
					&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
						Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), Xor: make([]byte, 4)},
					&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
					// mark | ReplyMark: (mark & ^ReplyMark) ^ ReplyMark.
					&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
						Mask: binary.NativeEndian.AppendUint32(nil, ^b.ReplyMark), Xor: binary.NativeEndian.AppendUint32(nil, b.ReplyMark)},
					&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
				})})
		}
		if b.HostPort != "" {
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
			out = append(out, nftRule{data: "noredirect:" + b.Name, chain: NftNoRedirectChain, exprs: cat(ifEq(expr.MetaKeyOIFNAME, b.Name), []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{137}}, // nd-redirect
			}, drop)})
		}
		switch b.Egress {
		case "", "none":
			// Out of the overlay, and into it from outside.
			out = append(out,
				nftRule{data: "none:" + b.Name, exprs: cat(ifEq(expr.MetaKeyIIFNAME, b.Name), notSkiff(expr.MetaKeyOIFNAME), drop)},
				nftRule{data: "in:" + b.Name, exprs: cat(notSkiff(expr.MetaKeyIIFNAME), ifEq(expr.MetaKeyOIFNAME, b.Name), drop)})
		case "snat":
			for _, from := range own {
				out = append(out, nftRule{data: "snat:" + from, chain: NftEgressChain, exprs: cat(ifEq(expr.MetaKeyIIFNAME, from),
					notSkiff(expr.MetaKeyOIFNAME), []expr.Any{&expr.Masq{}})})
			}
		}
	}
	return out
}

// SetIsolation makes the forward path drop what is routed from one of the
// given devices (bridges or gateways, and host ports) into another
// network's device ("skb", "skn" and "skg" prefixes): tenant networks
// stay apart even on a node that forwards. Bridged traffic inside one
// network is untouched. A device's egress decides what it may route out
// of the overlay (to any interface that is not a Skiff bridge, host port
// or gateway): nothing for "none"
// (dropped, and nothing is routed into it from outside either),
// everything for "routed", and everything masqueraded to the outgoing
// interface's address for "snat" (a nat chain at postrouting). ICMPv6
// redirects leaving a device with a host port are dropped (an output
// chain): the gateway stays its pods' first hop. It writes
// nothing when the rules already match, and otherwise replaces them in one
// atomic transaction. An empty list removes the table. Not safe for
// concurrent use with itself.
func (f *Firewall) SetIsolation(bridges []BridgeEgress) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("nl: nftables: %w", err)
	}
	rules := isolationRules(bridges)
	var want []string
	for _, r := range rules {
		want = append(want, r.data)
	}
	slices.Sort(want)
	have, exists, err := f.current(c)
	if err != nil {
		return err
	}
	if exists && slices.Equal(have, want) {
		return nil
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: NftTable}
	if len(want) == 0 {
		if !exists {
			return nil
		}
		c.DelTable(table)
		f.writes++
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nl: nftables: remove table %s: %w", NftTable, err)
		}
		return nil
	}
	// Add then delete then add again: creating the table is idempotent and
	// deleting it drops the old chains and rules, all in one transaction.
	c.AddTable(table)
	if exists {
		c.DelTable(table)
		c.AddTable(table)
	}
	accept := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{Name: NftIsolationChain, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	chains := map[string]*nftables.Chain{"": chain}
	for _, r := range rules {
		ch := chains[r.chain]
		if ch == nil {
			switch r.chain {
			case NftEgressChain:
				ch = c.AddChain(&nftables.Chain{Name: NftEgressChain, Table: table, Type: nftables.ChainTypeNAT,
					Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
			case NftUntrackChain:
				ch = c.AddChain(&nftables.Chain{Name: NftUntrackChain, Table: table, Type: nftables.ChainTypeFilter,
					Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw})
			case NftReplyChain:
				ch = c.AddChain(&nftables.Chain{Name: NftReplyChain, Table: table, Type: nftables.ChainTypeFilter,
					Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityMangle})
			case NftNoRedirectChain:
				ch = c.AddChain(&nftables.Chain{Name: NftNoRedirectChain, Table: table, Type: nftables.ChainTypeFilter,
					Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
			}
			chains[r.chain] = ch
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: ch, UserData: []byte(r.data), Exprs: r.exprs})
	}
	f.writes++
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nl: nftables: isolation and egress rules: %w", err)
	}
	return nil
}

// current returns the user data of the isolation and egress chains'
// rules, sorted.
func (f *Firewall) current(c *nftables.Conn) ([]string, bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, false, fmt.Errorf("nl: nftables: list tables: %w", err)
	}
	var table *nftables.Table
	for _, t := range tables {
		if t.Name == NftTable {
			table = t
		}
	}
	if table == nil {
		return nil, false, nil
	}
	rules, err := c.GetRules(table, &nftables.Chain{Name: NftIsolationChain, Table: table})
	if err != nil {
		// No such chain: the table is ours but incomplete; rebuild it.
		return nil, true, nil
	}
	for _, name := range []string{NftEgressChain, NftUntrackChain, NftReplyChain, NftNoRedirectChain} {
		if more, err := c.GetRules(table, &nftables.Chain{Name: name, Table: table}); err == nil {
			rules = append(rules, more...)
		}
	}
	var out []string
	for _, r := range rules {
		out = append(out, string(r.UserData))
	}
	slices.Sort(out)
	return out, true, nil
}

// Close releases the namespace handle.
func (f *Firewall) Close() {
	if f.ns >= 0 {
		f.ns.Close()
	}
}

// InetTables lists the names of the inet-family nftables tables of the
// namespace at path ("" for the caller's), Skiff's or not: a read for
// tests and diagnostics.
func InetTables(path string) ([]string, error) {
	f, err := OpenFirewall(Options{NetNS: path})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := f.conn()
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: list tables: %w", err)
	}
	var names []string
	for _, t := range tables {
		names = append(names, t.Name)
	}
	return names, nil
}

// EnableIPv4Forwarding sets net.ipv4.ip_forward to 1 in the firewall's
// namespace, reporting whether it was 0. Idempotent. It never sets it back
// to 0: a Kubernetes node's Services and the kubelet need forwarding too.
func (f *Firewall) EnableIPv4Forwarding() (changed bool, err error) {
	return f.enableSysctl("net/ipv4/ip_forward")
}

// EnableIPv6Forwarding sets net.ipv6.conf.all.forwarding to 1 in the
// firewall's namespace (which sets every interface's forwarding),
// reporting whether it was 0. Idempotent; never set back to 0. With
// forwarding on, an interface whose accept_ra is 1 no longer takes
// router advertisements (the kernel's rule for routers): a node whose
// own IPv6 address or default route comes from SLAAC needs accept_ra=2
// on that interface, which is the node's to set.
func (f *Firewall) EnableIPv6Forwarding() (changed bool, err error) {
	return f.enableSysctl("net/ipv6/conf/all/forwarding")
}

// enableSysctl sets a boolean sysctl to 1 in the firewall's namespace,
// reporting whether it was not 1.
func (f *Firewall) enableSysctl(name string) (changed bool, err error) {
	set := func() error {
		v, err := sysctl.Sysctl(name)
		if err != nil || strings.TrimSpace(v) == "1" {
			return err
		}
		changed = true
		_, err = sysctl.Sysctl(name, "1")
		return err
	}
	if f.path == "" {
		err = set()
	} else {
		err = ns.WithNetNSPath(f.path, func(ns.NetNS) error { return set() })
	}
	if err != nil {
		return false, fmt.Errorf("nl: %s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	return changed, nil
}
