package nl

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// NftTable is an nftables table of one family (inet unless Family says
// otherwise), whole: what Kernel.SetTable makes the kernel hold. A table
// with no chains is deleted. Tables are named within their family: an
// inet and a bridge table of one name are two tables.
//
// SetTable compares t with what the kernel holds: the chains (name,
// hook, type, priority, policy), each chain's rules in order (by their
// tag and a digest of what they say, kept in the rule's user data) and
// the sets (names and key types). When all of that matches it writes
// only the set elements that differ, in one transaction
// (NftChange.Elements); otherwise it replaces the table whole, in one
// transaction (NftChange.Rewritten), so no packet sees half a table.
// When the table already holds t it writes nothing.
type NftTable struct {
	Family NftFamily
	Name   string
	Sets   []NftSet
	Chains []NftChain
}

// NftFamily is the family of an nftables table: NftInet (the zero value)
// or NftBridge.
type NftFamily uint8

// Table families.
const (
	// NftInet tables see IPv4 and IPv6 packets.
	NftInet NftFamily = iota
	// NftBridge tables see the frames a bridge handles (its hooks
	// are the bridge's: forward is a frame going from one port to
	// another).
	NftBridge
)

func (f NftFamily) String() string {
	switch f {
	case NftInet:
		return "inet"
	case NftBridge:
		return "bridge"
	}
	return fmt.Sprintf("family%d", uint8(f))
}

// NftSetKey is what a set's elements are: addresses (the zero value) or
// pairs of an input interface name and an Ethernet address.
type NftSetKey uint8

// Set keys.
const (
	// SetKeyAddr: addresses of one family (key type ipv4_addr or
	// ipv6_addr), the elements SetTable writes (NftSet.Elems).
	SetKeyAddr NftSetKey = iota
	// SetKeyIfNameEther: key type ifname . ether_addr, flags dynamic
	// (and timeout with NftSet.Timeout): the elements are the
	// kernel's, added by rules (LearnPair) and read with
	// Kernel.SetElements; SetTable neither writes nor deletes them.
	SetKeyIfNameEther
)

// NftSet is a named set: of addresses of one family (Key SetKeyAddr),
// whose elements SetTable writes, or of interface name and Ethernet
// address pairs that rules fill (Key SetKeyIfNameEther).
type NftSet struct {
	Name  string
	Key   NftSetKey
	IPv6  bool         // an address set's key type ipv6_addr, else ipv4_addr
	Elems []netip.Addr // an address set's, of its family; order does not matter
	// Timeout is how long an element of a SetKeyIfNameEther set lives
	// after a rule last added or updated it (0: until deleted; the
	// kernel keeps milliseconds); Size caps how many it holds (0: the
	// kernel's default). Address sets have neither.
	Timeout time.Duration
	Size    uint32
}

// Dynamic reports whether the set's elements are the kernel's (rules
// add them) rather than SetTable's.
func (s NftSet) Dynamic() bool { return s.Key == SetKeyIfNameEther }

// Decl is the set's declaration as nft would list it, without its
// elements: what SetTable compares.
func (s NftSet) Decl() string {
	if s.Key == SetKeyIfNameEther {
		d := "type ifname . ether_addr; flags dynamic"
		if s.Timeout > 0 {
			d += fmt.Sprintf(",timeout; timeout %dms", s.Timeout.Milliseconds())
		}
		if s.Size > 0 {
			d += fmt.Sprintf("; size %d", s.Size)
		}
		return d + ";"
	}
	if s.IPv6 {
		return "type ipv6_addr;"
	}
	return "type ipv4_addr;"
}

// NftElement is an element of a set as Kernel.SetElements reads it: an
// address (an address set's), or an input interface name and an
// Ethernet address (lower-case, colon-separated) of a
// SetKeyIfNameEther set, with the time left before the kernel removes
// it (0: never).
type NftElement struct {
	Addr    netip.Addr
	IfName  string
	MAC     string
	Expires time.Duration
}

// Chain hooks.
const (
	HookPrerouting  = "prerouting"
	HookInput       = "input"
	HookForward     = "forward"
	HookOutput      = "output"
	HookPostrouting = "postrouting"
)

// Chain types.
const (
	ChainFilter = "filter"
	ChainNAT    = "nat"
)

// Chain priorities nft names.
const (
	PriorityRaw    = -300
	PriorityMangle = -150
	PriorityFilter = 0
	PrioritySrcNAT = 100
)

// NftChain is a chain: a base chain when Hook is set (with Type,
// Priority and its policy: accept, or drop when Drop is set), a regular
// one reached by jumps otherwise.
type NftChain struct {
	Name     string
	Hook     string
	Type     string
	Priority int
	Drop     bool
	Rules    []NftRule
}

// NftRule matches every one of Match (none: every packet), counts when
// Counter is set, then does Action (nil: nothing; the packet goes on to
// the next rule). Tag says what the rule is: it is kept in the rule's
// user data and TableCounters reports it.
type NftRule struct {
	Tag     string
	Match   []NftMatch
	Counter bool
	Action  NftAction
}

// NftMatch is one condition of a rule: IfName, Family, L4Proto, Addr,
// AddrIn, DPort, CtState, ICMPv6Type, Ether or EtherUnicast.
type NftMatch interface {
	String() string
	nftMatch()
}

// NftAction is what a rule does: Accept, Drop, Return, Jump, Masquerade,
// Notrack, OrMark or LearnPair.
type NftAction interface {
	String() string
	nftAction()
}

// IfName matches the input (or, Out, output) interface's name: the whole
// name, or only its first bytes when Prefix; Not inverts it.
type IfName struct {
	Out, Prefix, Not bool
	Name             string
}

// Family matches the packet's family (meta nfproto): IPv6 or IPv4.
type Family struct{ IPv6 bool }

// L4Proto matches the transport protocol (meta l4proto; unix.IPPROTO_*).
type L4Proto struct{ Proto uint8 }

// Addr matches the source (or, Dst, destination) address against a
// prefix (a whole address: equal); Not inverts it. The rule must match
// the prefix's Family first.
type Addr struct {
	Dst    bool
	Prefix netip.Prefix
	Not    bool
}

// AddrIn matches the source (or, Dst, destination) address against a
// set of the table (of the family IPv6 says).
type AddrIn struct {
	Dst  bool
	IPv6 bool
	Set  string
}

// DPort matches the transport destination port in From..To (From alone
// when To is 0). The rule must match the L4Proto first.
type DPort struct{ From, To uint16 }

// CtState matches packets of connections conntrack holds established or
// related (either).
type CtState struct{ Established, Related bool }

// ICMPv6Type matches ICMPv6 (meta l4proto) of type From..To (From alone
// when To is 0).
type ICMPv6Type struct{ From, To uint8 }

// Ether matches the Ethernet source (or, Dst, destination) address.
type Ether struct {
	Dst bool
	MAC string
}

// EtherUnicast matches frames whose Ethernet destination is a unicast
// address (its group bit clear): not broadcast, not multicast.
type EtherUnicast struct{}

// Actions.
type (
	// Accept, Drop and Return are verdicts.
	Accept struct{}
	Drop   struct{}
	Return struct{}
	// Jump goes to a regular chain of the table.
	Jump struct{ Chain string }
	// Masquerade translates the source to the outgoing interface's
	// address (nat chains).
	Masquerade struct{}
	// Notrack keeps conntrack away from the packet (raw priority).
	Notrack struct{}
	// OrMark sets the bits of Mark in the packet's mark.
	OrMark struct{ Mark uint32 }
	// LearnPair adds the frame's input interface name and Ethernet
	// destination to Set, a SetKeyIfNameEther set of the table, or
	// restarts the pair's timeout when the set holds it (nft's
	// update), and lets the frame go on to the next rule.
	LearnPair struct{ Set string }
)

func (IfName) nftMatch()       {}
func (Family) nftMatch()       {}
func (L4Proto) nftMatch()      {}
func (Addr) nftMatch()         {}
func (AddrIn) nftMatch()       {}
func (DPort) nftMatch()        {}
func (CtState) nftMatch()      {}
func (ICMPv6Type) nftMatch()   {}
func (Ether) nftMatch()        {}
func (EtherUnicast) nftMatch() {}

func (Accept) nftAction()     {}
func (Drop) nftAction()       {}
func (Return) nftAction()     {}
func (Jump) nftAction()       {}
func (Masquerade) nftAction() {}
func (Notrack) nftAction()    {}
func (OrMark) nftAction()     {}
func (LearnPair) nftAction()  {}

func neq(not bool) string {
	if not {
		return "!= "
	}
	return ""
}

func (m IfName) String() string {
	key, star := "iifname", ""
	if m.Out {
		key = "oifname"
	}
	if m.Prefix {
		star = "*"
	}
	return fmt.Sprintf("%s %s%q", key, neq(m.Not), m.Name+star)
}

func (m Family) String() string {
	if m.IPv6 {
		return "meta nfproto ipv6"
	}
	return "meta nfproto ipv4"
}

func (m L4Proto) String() string { return fmt.Sprintf("meta l4proto %d", m.Proto) }

func ipKey(v6, dst bool) string {
	fam, dir := "ip", "saddr"
	if v6 {
		fam = "ip6"
	}
	if dst {
		dir = "daddr"
	}
	return fam + " " + dir
}

func (m Addr) String() string {
	v := m.Prefix.String()
	if m.Prefix.IsSingleIP() {
		v = m.Prefix.Addr().String()
	}
	return fmt.Sprintf("%s %s%s", ipKey(m.Prefix.Addr().Is6(), m.Dst), neq(m.Not), v)
}

func (m AddrIn) String() string { return fmt.Sprintf("%s @%s", ipKey(m.IPv6, m.Dst), m.Set) }

func (m DPort) String() string {
	if m.To == 0 || m.To == m.From {
		return fmt.Sprintf("th dport %d", m.From)
	}
	return fmt.Sprintf("th dport %d-%d", m.From, m.To)
}

func (m CtState) String() string {
	var s []string
	if m.Established {
		s = append(s, "established")
	}
	if m.Related {
		s = append(s, "related")
	}
	return "ct state " + strings.Join(s, ",")
}

func (m ICMPv6Type) String() string {
	if m.To == 0 || m.To == m.From {
		return fmt.Sprintf("icmpv6 type %d", m.From)
	}
	return fmt.Sprintf("icmpv6 type %d-%d", m.From, m.To)
}

func (m Ether) String() string {
	if m.Dst {
		return "ether daddr " + m.MAC
	}
	return "ether saddr " + m.MAC
}

func (EtherUnicast) String() string {
	return "ether daddr & 01:00:00:00:00:00 == 00:00:00:00:00:00"
}

func (Accept) String() string     { return "accept" }
func (Drop) String() string       { return "drop" }
func (Return) String() string     { return "return" }
func (a Jump) String() string     { return "jump " + a.Chain }
func (Masquerade) String() string { return "masquerade" }
func (Notrack) String() string    { return "notrack" }
func (a OrMark) String() string   { return fmt.Sprintf("meta mark set mark | %#x", a.Mark) }
func (a LearnPair) String() string {
	return "update @" + a.Set + " { iifname . ether daddr }"
}

// String is the rule as nft would list it, without its tag.
func (r NftRule) String() string {
	var parts []string
	for _, m := range r.Match {
		parts = append(parts, m.String())
	}
	if r.Counter {
		parts = append(parts, "counter")
	}
	if r.Action != nil {
		parts = append(parts, r.Action.String())
	}
	return strings.Join(parts, " ")
}

// Digest is a short stable digest of what the rule says (its tag
// included), which SetTable keeps in the rule's user data to tell
// whether the kernel's rule is this one.
func (r NftRule) Digest() string {
	h := uint64(14695981039346656037) // FNV-1a
	for _, s := range []string{r.Tag, "\x00", r.String()} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	return fmt.Sprintf("%016x", h)
}

// Header is the chain's declaration as nft would list it ("" for a
// regular chain).
func (c NftChain) Header() string {
	if c.Hook == "" {
		return ""
	}
	policy := "accept"
	if c.Drop {
		policy = "drop"
	}
	return fmt.Sprintf("type %s hook %s priority %d; policy %s;", c.Type, c.Hook, c.Priority, policy)
}

// NftChange is what SetTable wrote: the table replaced (or created, or
// deleted) whole, or set elements added and deleted. The zero value:
// nothing.
type NftChange struct {
	Rewritten bool
	Elements  int
}

// NftCounter is what a rule with a counter has matched since the table
// was last rewritten.
type NftCounter struct {
	Chain, Tag     string
	Packets, Bytes uint64
}
