package nltest

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The nftables half of a handle: SetTable with the real handle's
// comparison (nft.go of internal/nl), and the checks its build and the
// kernel make.

// table is a table as the kernel holds it: its family, chains and rules
// (with the user data SetTable gave each: "" for someone else's), its
// sets' elements (an address set's in elems, a dynamic set's in pairs)
// and the rules' counters.
type table struct {
	family  nl.NftFamily
	name    string
	foreign bool
	chains  []nl.NftChain
	ud      [][]string
	counter [][]nftCount
	sets    []nl.NftSet // Elems unused: see elems
	elems   []map[netip.Addr]bool
	pairs   []map[learned]time.Time // when each expires (zero: never)
}

// learned is an element of a SetKeyIfNameEther set.
type learned struct{ ifname, mac string }

type nftCount struct{ packets, bytes uint64 }

// userData is what a rule written by SetTable carries, as the real
// handle writes it.
func userData(r nl.NftRule) string { return r.Digest() + ":" + r.Tag }

// tagOf is the tag of a rule's user data, false for a rule SetTable did
// not write.
func tagOf(ud string) (string, bool) {
	if len(ud) < 17 || ud[16] != ':' {
		return "", false
	}
	return ud[17:], true
}

func (n *NS) table(f nl.NftFamily, name string) (*table, int) {
	for i, t := range n.tables {
		if t.family == f && t.name == name {
			return t, i
		}
	}
	return nil, -1
}

// newTable is t as the kernel would hold it after a write; foreign: its
// rules carry no user data.
func newTable(t nl.NftTable, foreign bool) *table {
	x := &table{family: t.Family, name: t.Name, foreign: foreign}
	for _, c := range t.Chains {
		c.Rules = slices.Clone(c.Rules)
		uds := make([]string, len(c.Rules))
		if !foreign {
			for i, r := range c.Rules {
				uds[i] = userData(r)
			}
		}
		x.chains = append(x.chains, c)
		x.ud = append(x.ud, uds)
		x.counter = append(x.counter, make([]nftCount, len(c.Rules)))
	}
	for _, s := range t.Sets {
		in := map[netip.Addr]bool{}
		for _, a := range s.Elems {
			if a.Is6() == s.IPv6 {
				in[a] = true
			}
		}
		if s.Dynamic() {
			in = nil
		}
		s.Elems = nil
		x.sets = append(x.sets, s)
		x.elems = append(x.elems, in)
		x.pairs = append(x.pairs, map[learned]time.Time{})
	}
	return x
}

// sameChain reports whether the held chain h is c's declaration.
func sameChain(h, c nl.NftChain) bool {
	if (h.Hook == "") != (c.Hook == "") {
		return false
	}
	return c.Hook == "" || h.Hook == c.Hook && h.Type == c.Type && h.Priority == c.Priority && h.Drop == c.Drop
}

// same reports whether the held table h has t's chains, rules (by user
// data) and sets (names and key types), as the real handle compares.
func (h *table) same(t nl.NftTable) bool {
	have := map[string]int{}
	for i, c := range h.chains {
		have[c.Name] = i
	}
	if len(have) != len(t.Chains) {
		return false
	}
	for _, want := range t.Chains {
		i, ok := have[want.Name]
		if !ok || !sameChain(h.chains[i], want) || len(h.ud[i]) != len(want.Rules) {
			return false
		}
		for j, r := range want.Rules {
			if h.ud[i][j] != userData(r) {
				return false
			}
		}
	}
	if len(h.sets) != len(t.Sets) {
		return false
	}
	for _, want := range t.Sets {
		i := slices.IndexFunc(h.sets, func(s nl.NftSet) bool { return s.Name == want.Name })
		if i < 0 || h.sets[i].Decl() != want.Decl() {
			return false
		}
	}
	return true
}

// sync makes h's address set elements t's and returns how many it added
// and deleted; a dynamic set's are the kernel's.
func (h *table) sync(t nl.NftTable) int {
	changed := 0
	for _, s := range t.Sets {
		if s.Dynamic() {
			continue
		}
		i := slices.IndexFunc(h.sets, func(x nl.NftSet) bool { return x.Name == s.Name })
		want := newTable(nl.NftTable{Sets: []nl.NftSet{s}}, false).elems[0]
		for a := range want {
			if !h.elems[i][a] {
				changed++
			}
		}
		for a := range h.elems[i] {
			if !want[a] {
				changed++
			}
		}
		h.elems[i] = want
	}
	return changed
}

func (k *kernel) SetTable(t nl.NftTable) (nl.NftChange, error) {
	var out nl.NftChange
	err := k.do(func(n *NS) error {
		if err := checkFamily(t.Family); err != nil {
			return fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
		}
		h, i := n.table(t.Family, t.Name)
		if len(t.Chains) == 0 {
			if h != nil {
				k.write()
				n.tables = slices.Delete(n.tables, i, i+1)
				out.Rewritten = true
			}
			return nil
		}
		if h != nil && h.same(t) {
			if out.Elements = h.sync(t); out.Elements > 0 {
				k.write()
			}
			return nil
		}
		if err := checkTable(t); err != nil {
			return fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
		}
		k.write()
		if h != nil {
			n.tables = slices.Delete(n.tables, i, i+1) // deleted and added again: last
		}
		n.tables = append(n.tables, newTable(t, false))
		out.Rewritten = true
		return nil
	})
	return out, err
}

var nftHooks = map[string]bool{nl.HookPrerouting: true, nl.HookInput: true, nl.HookForward: true, nl.HookOutput: true, nl.HookPostrouting: true}

// checkTable refuses what the real handle's build or the kernel refuse
// of t.
func checkTable(t nl.NftTable) error {
	sets := map[string]nl.NftSet{}
	for _, s := range t.Sets {
		if s.Name == "" {
			return fmt.Errorf("set %q: %w", s.Name, unix.EINVAL)
		}
		if _, dup := sets[s.Name]; dup {
			return fmt.Errorf("set %s: %w", s.Name, unix.EEXIST)
		}
		switch s.Key {
		case nl.SetKeyAddr:
		case nl.SetKeyIfNameEther:
			if s.Timeout < 0 || s.Timeout > 0 && s.Timeout < time.Millisecond {
				return fmt.Errorf("set %s: timeout %v: not a whole number of milliseconds above 0", s.Name, s.Timeout)
			}
		default:
			return fmt.Errorf("set %s: key: unknown %d", s.Name, uint8(s.Key))
		}
		sets[s.Name] = s
	}
	chains := map[string]nl.NftChain{}
	for _, c := range t.Chains {
		if _, dup := chains[c.Name]; dup || c.Name == "" {
			return fmt.Errorf("chain %q: %w", c.Name, unix.EEXIST)
		}
		chains[c.Name] = c
		if c.Hook == "" {
			continue
		}
		if !nftHooks[c.Hook] {
			return fmt.Errorf("chain %s: unknown hook %q", c.Name, c.Hook)
		}
		if c.Type != nl.ChainFilter && c.Type != nl.ChainNAT {
			return fmt.Errorf("chain %s: unknown type %q", c.Name, c.Type)
		}
		if t.Family == nl.NftBridge && c.Type == nl.ChainNAT {
			return fmt.Errorf("chain %s: type %s in a bridge table: %w", c.Name, c.Type, unix.ENOENT)
		}
	}
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			if err := checkRule(t.Family, c, r, sets, chains); err != nil {
				return fmt.Errorf("chain %s rule %d (%s): %w", c.Name, i, r, err)
			}
			if len(userData(r)) > 256 {
				return fmt.Errorf("chain %s rule %d: tag %q is longer than nftables keeps", c.Name, i, r.Tag)
			}
		}
	}
	return nil
}

func checkRule(f nl.NftFamily, c nl.NftChain, r nl.NftRule, sets map[string]nl.NftSet, chains map[string]nl.NftChain) error {
	for _, m := range r.Match {
		switch m := m.(type) {
		case nl.Addr:
			if !m.Prefix.IsValid() {
				return fmt.Errorf("address match without a prefix")
			}
		case nl.AddrIn:
			s, ok := sets[m.Set]
			if !ok {
				return fmt.Errorf("lookup in %s: no such set in the table", m.Set)
			}
			if s.Key != nl.SetKeyAddr || s.IPv6 != m.IPv6 {
				return fmt.Errorf("lookup in %s: %w", m.Set, unix.EINVAL) // key length
			}
		case nl.Ether:
			if _, err := net.ParseMAC(m.MAC); err != nil {
				return fmt.Errorf("ether address %q: %w", m.MAC, err)
			}
		}
	}
	switch a := r.Action.(type) {
	case nl.Jump:
		to, ok := chains[a.Chain]
		if !ok {
			return fmt.Errorf("jump to %s: no such chain in the table", a.Chain)
		}
		if to.Hook != "" {
			return fmt.Errorf("jump to %s: %w", a.Chain, unix.EOPNOTSUPP) // a base chain
		}
	case nl.LearnPair:
		s, ok := sets[a.Set]
		if !ok {
			return fmt.Errorf("update of %s: no such set in the table", a.Set)
		}
		if s.Key != nl.SetKeyIfNameEther {
			return fmt.Errorf("update of %s: not a dynamic set of ifname . ether_addr", a.Set)
		}
	case nl.Masquerade:
		if f == nl.NftBridge {
			return fmt.Errorf("masquerade in a bridge table: %w", unix.ENOENT) // no such expression
		}
		if c.Hook != "" && (c.Type != nl.ChainNAT || c.Hook != nl.HookPostrouting) {
			return fmt.Errorf("masquerade: %w", unix.EOPNOTSUPP)
		}
	}
	return nil
}

// checkFamily refuses a family the real handle does not know.
func checkFamily(f nl.NftFamily) error {
	if f != nl.NftInet && f != nl.NftBridge {
		return fmt.Errorf("family: unknown %d", uint8(f))
	}
	return nil
}

func (k *kernel) Tables(f nl.NftFamily) ([]string, error) {
	if err := checkFamily(f); err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	var out []string
	err := k.do(func(n *NS) error {
		for _, t := range n.tables {
			if t.family == f {
				out = append(out, t.name)
			}
		}
		return nil
	})
	return out, err
}

func (k *kernel) TableCounters(f nl.NftFamily, name string) ([]nl.NftCounter, error) {
	if err := checkFamily(f); err != nil {
		return nil, fmt.Errorf("nl: nftables: table %s: %w", name, err)
	}
	var out []nl.NftCounter
	err := k.do(func(n *NS) error {
		t, _ := n.table(f, name)
		if t == nil {
			return nil
		}
		for i, c := range t.chains {
			for j, r := range c.Rules {
				if tag, ok := tagOf(t.ud[i][j]); ok && r.Counter {
					x := t.counter[i][j]
					out = append(out, nl.NftCounter{Chain: c.Name, Tag: tag, Packets: x.packets, Bytes: x.bytes})
				}
			}
		}
		slices.SortStableFunc(out, func(a, b nl.NftCounter) int { return cmp.Compare(a.Chain, b.Chain) })
		return nil
	})
	return out, err
}
