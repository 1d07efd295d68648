package nl

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// PolicyPort is an allowed protocol (unix.IPPROTO_TCP, _UDP, _SCTP) and
// destination port range; From 0 means every port.
type PolicyPort struct {
	Proto    uint8
	From, To uint16
}

// PolicyPeer is an allowed peer: a named address set, or a CIDR with
// exceptions.
type PolicyPeer struct {
	Set    string
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// PolicyRule allows any of Peers (none: every peer) on any of Ports (none:
// every port).
type PolicyRule struct {
	Peers []PolicyPeer
	Ports []PolicyPort
}

// EndpointPolicy is one isolated endpoint: the bridge it is on, its
// addresses, and what it may receive and send. Bridge is the device its
// traffic enters the node's stack through and leaves it by: its
// network's bridge on a software node; on an offload node, whose
// flower rules enforce the rest, its network's gateway skg<VNI>, for
// the egress the node routes (after DNAT), with no ingress.
type EndpointPolicy struct {
	Name            string
	Bridge          string
	IPs             []netip.Addr
	IngressIsolated bool
	EgressIsolated  bool
	Ingress, Egress []PolicyRule
}

// PolicyConfig is the whole policy state of a node.
type PolicyConfig struct {
	Sets      map[string][]netip.Addr
	Endpoints []EndpointPolicy
}

// NftPolicyTable is the table SetPolicy owns.
const NftPolicyTable = "skiff-policy"

// PolicyWrites counts what SetPolicy changed: whole-table rewrites (the
// rules changed) and set elements added or deleted (only group members
// changed).
type PolicyWrites struct {
	Tables   int
	Elements int
}

// PolicyWrites returns what SetPolicy has written so far.
func (f *Firewall) PolicyWrites() PolicyWrites {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy
}

// SetPolicy makes the node enforce cfg in one table ("inet
// skiff-policy"). Replies of allowed connections pass (conntrack), and so
// does what concerns no isolated endpoint. Bridged traffic reaches this
// table through br_netfilter; the caller enables
// bridge-nf-call-ip(6)tables.
//
// Every change is one atomic transaction, so no packet sees a
// half-applied policy. When only the members of address groups differ
// from what the table holds, only those set elements are added and
// deleted (rule counters and everything else stay); when the rules
// differ, the table is replaced whole. It writes nothing when the table
// already holds cfg. The rules' shape is compared through a digest kept in
// the first rule's user data; set members are compared with the kernel's.
func (f *Firewall) SetPolicy(cfg PolicyConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("nl: nftables: %w", err)
	}
	digest := cfg.digest()
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: NftPolicyTable}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nl: nftables: list tables: %w", err)
	}
	exists := slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == NftPolicyTable })
	if exists && len(cfg.Endpoints) > 0 {
		if rules, err := c.GetRules(table, &nftables.Chain{Name: "forward", Table: table}); err == nil && len(rules) > 0 && string(rules[0].UserData) == digest {
			n, err := f.syncSets(c, table, cfg)
			if err == nil {
				if n > 0 {
					f.writes++
					f.policy.Elements += n
				}
				return nil
			}
			// The sets are not what the digest says: rewrite the table.
		}
	}
	if len(cfg.Endpoints) == 0 {
		if exists {
			c.DelTable(table)
			f.writes++
			f.policy.Tables++
			if err := c.Flush(); err != nil {
				return fmt.Errorf("nl: nftables: remove %s: %w", NftPolicyTable, err)
			}
		}
		return nil
	}
	c.AddTable(table)
	if exists {
		c.DelTable(table)
		c.AddTable(table)
	}
	sets := map[string]*nftables.Set{}
	for _, name := range slicesSorted(cfg.Sets) {
		for _, v6 := range []bool{false, true} {
			s := &nftables.Set{Table: table, Name: setName(name, v6), KeyType: nftables.TypeIPAddr}
			if v6 {
				s.KeyType = nftables.TypeIP6Addr
			}
			if err := c.AddSet(s, nil); err != nil {
				return fmt.Errorf("nl: nftables: set %s: %w", name, err)
			}
			if err := chunked(setElements(cfg.Sets[name], v6), func(es []nftables.SetElement) error { return c.SetAddElements(s, es) }); err != nil {
				return fmt.Errorf("nl: nftables: set %s: %w", name, err)
			}
			sets[s.Name] = s
		}
	}
	accept := nftables.ChainPolicyAccept
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	// First rule: replies and related traffic pass. Its user data holds
	// the digest of the rules.
	c.AddRule(&nftables.Rule{Table: table, Chain: fwd, UserData: []byte(digest), Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	for _, e := range cfg.Endpoints {
		for _, dir := range []struct {
			on    bool
			name  string
			rules []PolicyRule
			// dev matches the endpoint's bridge: the packet leaves
			// through it (ingress) or came in through it (egress).
			dev  expr.MetaKey
			own  uint32 // offset of the endpoint's own address: daddr (ingress) or saddr (egress)
			peer uint32
		}{{e.IngressIsolated, PolicyIngress, e.Ingress, expr.MetaKeyOIFNAME, 16, 12}, {e.EgressIsolated, PolicyEgress, e.Egress, expr.MetaKeyIIFNAME, 12, 16}} {
			if !dir.on {
				continue
			}
			chain := dir.name + "-" + e.Name
			ch := c.AddChain(&nftables.Chain{Name: chain, Table: table})
			for _, ip := range e.IPs {
				c.AddRule(&nftables.Rule{Table: table, Chain: fwd, Exprs: slices.Concat(
					[]expr.Any{&expr.Meta{Key: dir.dev, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(e.Bridge)}},
					l3(ip.Is6()), addrMatch(ip, dir.own),
					[]expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}})})
			}
			for i, r := range dir.rules {
				tag := []byte(fmt.Sprintf("%s\x00%s\x00%d", e.Name, dir.name, i))
				for _, v6 := range []bool{false, true} {
					peers := r.Peers
					if len(peers) == 0 {
						peers = []PolicyPeer{{}}
					}
					for _, p := range peers {
						if p.CIDR.IsValid() && p.CIDR.Addr().Is6() != v6 {
							continue
						}
						var pe []expr.Any
						switch {
						case p.Set != "":
							pe = []expr.Any{
								&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: peerOff(dir.peer, v6), Len: addrLen(v6)},
								&expr.Lookup{SourceRegister: 1, SetName: setName(p.Set, v6), SetID: sets[setName(p.Set, v6)].ID},
							}
						case p.CIDR.IsValid():
							pe = prefixMatch(p.CIDR, peerOff(dir.peer, v6), expr.CmpOpEq)
							for _, x := range p.Except {
								if x.Addr().Is6() == v6 {
									pe = append(pe, prefixMatch(x, peerOff(dir.peer, v6), expr.CmpOpNeq)...)
								}
							}
						}
						ports := r.Ports
						if len(ports) == 0 {
							ports = []PolicyPort{{}}
						}
						for _, pt := range ports {
							c.AddRule(&nftables.Rule{Table: table, Chain: ch, UserData: tag, Exprs: slices.Concat(
								l3(v6), pe, portMatch(pt), []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictReturn}})})
						}
					}
				}
			}
			// ARP never reaches an inet table; ND must pass for IPv6 to work.
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: slices.Concat(l3(true),
				[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
					&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
					&expr.Verdict{Kind: expr.VerdictReturn}})})
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, UserData: []byte(e.Name + "\x00" + dir.name + "\x00drop"),
				Exprs: []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}})
		}
	}
	f.writes++
	f.policy.Tables++
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nl: nftables: policy: %w", err)
	}
	return nil
}

// Directions of policy chains and counters.
const (
	PolicyIngress = "in"
	PolicyEgress  = "out"
)

func setElements(addrs []netip.Addr, v6 bool) []nftables.SetElement {
	var out []nftables.SetElement
	for _, a := range addrs {
		if a.Is6() == v6 {
			out = append(out, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	return out
}

// setChunk is how many elements go in one netlink message: the element
// list is one attribute, whose length field has 16 bits, so a large set
// sent whole is cut short without an error. The messages of a batch still
// apply atomically.
const setChunk = 1000

func chunked(es []nftables.SetElement, f func([]nftables.SetElement) error) error {
	for len(es) > 0 {
		n := min(len(es), setChunk)
		if err := f(es[:n]); err != nil {
			return err
		}
		es = es[n:]
	}
	return nil
}

// syncSets adds and deletes the set elements that differ from cfg, in
// one transaction, and returns how many it changed. It fails, writing
// nothing, when a set is missing.
func (f *Firewall) syncSets(c *nftables.Conn, table *nftables.Table, cfg PolicyConfig) (int, error) {
	n := 0
	for _, name := range slicesSorted(cfg.Sets) {
		for _, v6 := range []bool{false, true} {
			s, err := c.GetSetByName(table, setName(name, v6))
			if err != nil {
				return 0, fmt.Errorf("nl: nftables: set %s: %w", setName(name, v6), err)
			}
			have, err := c.GetSetElements(s)
			if err != nil {
				return 0, fmt.Errorf("nl: nftables: set %s elements: %w", s.Name, err)
			}
			want := setElements(cfg.Sets[name], v6)
			key := func(e nftables.SetElement) string { return string(e.Key) }
			in := func(es []nftables.SetElement, k string) bool {
				return slices.ContainsFunc(es, func(e nftables.SetElement) bool { return key(e) == k })
			}
			var add, del []nftables.SetElement
			for _, e := range want {
				if !in(have, key(e)) {
					add = append(add, e)
				}
			}
			for _, e := range have {
				if !in(want, key(e)) {
					del = append(del, nftables.SetElement{Key: e.Key})
				}
			}
			if err := chunked(add, func(es []nftables.SetElement) error { return c.SetAddElements(s, es) }); err != nil {
				return 0, fmt.Errorf("nl: nftables: set %s: %w", s.Name, err)
			}
			if err := chunked(del, func(es []nftables.SetElement) error { return c.SetDeleteElements(s, es) }); err != nil {
				return 0, fmt.Errorf("nl: nftables: set %s: %w", s.Name, err)
			}
			n += len(add) + len(del)
		}
	}
	if n == 0 {
		return 0, nil
	}
	if err := c.Flush(); err != nil {
		return 0, fmt.Errorf("nl: nftables: policy sets: %w", err)
	}
	return n, nil
}

// PolicyCounter is what one compiled rule (or the final drop) of an
// isolated endpoint has matched since the rules were last rewritten.
// Only the first packet of a connection is counted: replies and later
// packets pass as established before any endpoint chain.
type PolicyCounter struct {
	Endpoint  string
	Direction string // PolicyIngress or PolicyEgress
	Rule      int    // index of the rule in the endpoint's direction; -1 for the drop
	Packets   uint64
	Bytes     uint64
}

// PolicyCounters reads the counters of every endpoint chain, summed per
// compiled rule (one rule may be several nftables rules: one per peer,
// port and address family), sorted by endpoint, direction and rule.
func (f *Firewall) PolicyCounters() ([]PolicyCounter, error) {
	c, err := f.conn()
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: NftPolicyTable}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: list chains: %w", err)
	}
	sum := map[PolicyCounter]PolicyCounter{}
	for _, ch := range chains {
		if ch.Table.Name != NftPolicyTable || ch.Name == "forward" {
			continue
		}
		rules, err := c.GetRules(table, ch)
		if err != nil {
			return nil, fmt.Errorf("nl: nftables: rules of %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			parts := strings.Split(string(r.UserData), "\x00")
			if len(parts) != 3 {
				continue
			}
			k := PolicyCounter{Endpoint: parts[0], Direction: parts[1], Rule: -1}
			if parts[2] != "drop" {
				i, err := strconv.Atoi(parts[2])
				if err != nil {
					continue
				}
				k.Rule = i
			}
			v := sum[k]
			v.Endpoint, v.Direction, v.Rule = k.Endpoint, k.Direction, k.Rule
			for _, e := range r.Exprs {
				if ct, ok := e.(*expr.Counter); ok {
					v.Packets += ct.Packets
					v.Bytes += ct.Bytes
				}
			}
			sum[k] = v
		}
	}
	out := slices.Collect(maps.Values(sum))
	slices.SortFunc(out, func(a, b PolicyCounter) int {
		return cmp.Or(cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Rule, b.Rule))
	})
	return out, nil
}

func slicesSorted(m map[string][]netip.Addr) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func setName(name string, v6 bool) string {
	if v6 {
		return name + "-6"
	}
	return name + "-4"
}

func addrLen(v6 bool) uint32 {
	if v6 {
		return 16
	}
	return 4
}

// peerOff maps the IPv4 header offsets (12 saddr, 16 daddr) to IPv6's.
func peerOff(off uint32, v6 bool) uint32 {
	if !v6 {
		return off
	}
	if off == 12 {
		return 8
	}
	return 24
}

func iifIs(name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)}}
}

func l3(v6 bool) []expr.Any {
	proto := []byte{unix.NFPROTO_IPV4}
	if v6 {
		proto = []byte{unix.NFPROTO_IPV6}
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: proto}}
}

func addrMatch(a netip.Addr, off uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: peerOff(off, a.Is6()), Len: addrLen(a.Is6())},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

func prefixMatch(p netip.Prefix, off uint32, op expr.CmpOp) []expr.Any {
	n := addrLen(p.Addr().Is6())
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

func portMatch(p PolicyPort) []expr.Any {
	if p.Proto == 0 {
		return nil
	}
	out := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p.Proto}}}
	if p.From == 0 {
		return out
	}
	from, to := binary.BigEndian.AppendUint16(nil, p.From), binary.BigEndian.AppendUint16(nil, max(p.To, p.From))
	return append(out,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: from, ToData: to})
}

// digest is a stable text of the configuration's rules and set names.
func (cfg PolicyConfig) digest() string {
	var b strings.Builder
	for _, name := range slicesSorted(cfg.Sets) {
		fmt.Fprintf(&b, "set %s;", name) // members are compared with the kernel's
	}
	for _, e := range cfg.Endpoints {
		fmt.Fprintf(&b, "ep %+v;", e)
	}
	sum := fnv64(b.String())
	return fmt.Sprintf("skiff-policy:%016x", sum)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// EnableBridgeNetfilter makes bridged IPv4 and IPv6 traffic traverse the
// inet hooks (net.bridge.bridge-nf-call-ip{,6}tables = 1) in the
// firewall's namespace, which policy enforcement needs. It writes only
// what is not already 1 (Kubernetes nodes usually have it set).
func (f *Firewall) EnableBridgeNetfilter() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		// br_netfilter is a module on most distribution kernels and
		// nothing loads it on demand.
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			return fmt.Errorf("nl: loading br_netfilter (bridged traffic must reach the policy): %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	do := func() error {
		for _, name := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"} {
			p := "/proc/sys/net/bridge/" + name
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("nl: %s: %w (is the br_netfilter module loaded?)", p, err)
			}
			if strings.TrimSpace(string(b)) == "1" {
				continue
			}
			if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
				return fmt.Errorf("nl: %s: %w", p, err)
			}
			f.writes++
		}
		return nil
	}
	// /proc/sys/net follows the calling thread's namespace.
	return InNetNS(f.path, do)
}
