package nl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
)

// The nftables half of a namespace's handle: SetTable makes a table (of
// its family) hold a description (NftTable), nft_expr.go turns its rules
// into expressions, nft_set.go declares sets and syncs and reads their
// elements. Only the named table is read or changed.

func (k *real) nft() (*nftables.Conn, error) {
	if k.ns >= 0 {
		return nftables.New(nftables.WithNetNSFd(int(k.ns)))
	}
	return nftables.New()
}

// userData is what a rule of SetTable carries: the digest of what it
// says, then its tag.
func userData(r NftRule) string { return r.Digest() + ":" + r.Tag }

// tagOf is the tag of a rule's user data ("" for a rule SetTable did not
// write).
func tagOf(ud []byte) (string, bool) {
	s := string(ud)
	if len(s) < 17 || s[16] != ':' {
		return "", false
	}
	return s[17:], true
}

var hooks = map[string]*nftables.ChainHook{
	HookPrerouting: nftables.ChainHookPrerouting, HookInput: nftables.ChainHookInput, HookForward: nftables.ChainHookForward,
	HookOutput: nftables.ChainHookOutput, HookPostrouting: nftables.ChainHookPostrouting,
}

// chainOf is the library's chain of c in table.
func chainOf(table *nftables.Table, c NftChain) (*nftables.Chain, error) {
	ch := &nftables.Chain{Name: c.Name, Table: table}
	if c.Hook == "" {
		return ch, nil
	}
	hook, ok := hooks[c.Hook]
	if !ok {
		return nil, fmt.Errorf("chain %s: unknown hook %q", c.Name, c.Hook)
	}
	switch c.Type {
	case ChainFilter, ChainNAT:
	default:
		return nil, fmt.Errorf("chain %s: unknown type %q", c.Name, c.Type)
	}
	policy := nftables.ChainPolicyAccept
	if c.Drop {
		policy = nftables.ChainPolicyDrop
	}
	ch.Hooknum, ch.Type, ch.Priority, ch.Policy = hook, nftables.ChainType(c.Type), nftables.ChainPriorityRef(nftables.ChainPriority(c.Priority)), &policy
	return ch, nil
}

// sameChain reports whether the kernel's chain h is c's declaration.
func sameChain(h *nftables.Chain, c NftChain) bool {
	if (h.Hooknum == nil) != (c.Hook == "") {
		return false
	}
	if c.Hook == "" {
		return true
	}
	want := nftables.ChainPolicyAccept
	if c.Drop {
		want = nftables.ChainPolicyDrop
	}
	policy := nftables.ChainPolicyAccept // the kernel's default
	if h.Policy != nil {
		policy = *h.Policy
	}
	return *h.Hooknum == *hooks[c.Hook] && h.Priority != nil && int(*h.Priority) == c.Priority &&
		string(h.Type) == c.Type && policy == want
}

// familyOf is the library's family of f.
func familyOf(f NftFamily) (nftables.TableFamily, error) {
	switch f {
	case NftInet:
		return nftables.TableFamilyINet, nil
	case NftBridge:
		return nftables.TableFamilyBridge, nil
	}
	return 0, fmt.Errorf("family: unknown %d", uint8(f))
}

// held is what the kernel holds of a table.
type held struct {
	exists bool
	same   bool // chains, rules and sets as the description says
	sets   map[string]*nftables.Set
}

// read compares the kernel's table with t, of family fam.
func read(c *nftables.Conn, fam nftables.TableFamily, t NftTable) (held, error) {
	var h held
	tables, err := c.ListTablesOfFamily(fam)
	if err != nil {
		return h, fmt.Errorf("list tables: %w", err)
	}
	h.exists = slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == t.Name })
	if !h.exists {
		return h, nil
	}
	table := &nftables.Table{Family: fam, Name: t.Name}
	chains, err := c.ListChainsOfTableFamily(fam)
	if err != nil {
		return h, fmt.Errorf("list chains: %w", err)
	}
	have := map[string]*nftables.Chain{}
	for _, ch := range chains {
		if ch.Table.Name == t.Name {
			have[ch.Name] = ch
		}
	}
	if len(have) != len(t.Chains) {
		return h, nil
	}
	for _, want := range t.Chains {
		ch, ok := have[want.Name]
		if !ok || !sameChain(ch, want) {
			return h, nil
		}
		rules, err := c.GetRules(table, ch)
		if err != nil {
			return h, fmt.Errorf("rules of %s: %w", want.Name, err)
		}
		if len(rules) != len(want.Rules) {
			return h, nil
		}
		for i, r := range rules {
			if string(r.UserData) != userData(want.Rules[i]) {
				return h, nil
			}
		}
	}
	sets, err := c.GetSets(table)
	if err != nil {
		return h, fmt.Errorf("list sets: %w", err)
	}
	if len(sets) != len(t.Sets) {
		return h, nil
	}
	h.sets = map[string]*nftables.Set{}
	for _, s := range sets {
		h.sets[s.Name] = s
	}
	for _, want := range t.Sets {
		s, ok := h.sets[want.Name]
		if !ok || !sameSet(s, want) {
			return h, nil
		}
	}
	h.same = true
	return h, nil
}

func (k *real) SetTable(t NftTable) (NftChange, error) {
	fam, err := familyOf(t.Family)
	if err != nil {
		return NftChange{}, fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
	}
	c, err := k.nft()
	if err != nil {
		return NftChange{}, fmt.Errorf("nl: nftables: %w", err)
	}
	h, err := read(c, fam, t)
	if err != nil {
		return NftChange{}, fmt.Errorf("nl: nftables: table %s %s: %w", t.Family, t.Name, err)
	}
	table := &nftables.Table{Family: fam, Name: t.Name}
	if len(t.Chains) == 0 {
		if !h.exists {
			return NftChange{}, nil
		}
		c.DelTable(table)
		k.w()
		if err := c.Flush(); err != nil {
			return NftChange{}, fmt.Errorf("nl: nftables: remove table %s: %w", t.Name, err)
		}
		return NftChange{Rewritten: true}, nil
	}
	if h.same {
		n, err := syncElements(c, t, h.sets)
		if err != nil {
			return NftChange{}, fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
		}
		if n > 0 {
			k.w()
		}
		return NftChange{Elements: n}, nil
	}
	// Add, delete and add again: creating the table is idempotent and
	// deleting it drops the old chains, rules and sets, all in one
	// transaction.
	c.AddTable(table)
	if h.exists {
		c.DelTable(table)
		c.AddTable(table)
	}
	if err := build(c, table, t); err != nil {
		return NftChange{}, fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
	}
	k.w()
	if err := c.Flush(); err != nil {
		return NftChange{}, fmt.Errorf("nl: nftables: table %s: %w", t.Name, err)
	}
	return NftChange{Rewritten: true}, nil
}

// build queues t's sets, chains and rules into table.
func build(c *nftables.Conn, table *nftables.Table, t NftTable) error {
	sets := map[string]*nftables.Set{}
	for _, s := range t.Sets {
		set, err := setOf(table, s)
		if err != nil {
			return err
		}
		if err := c.AddSet(set, nil); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
		if err := chunked(elements(s), func(es []nftables.SetElement) error { return c.SetAddElements(set, es) }); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
		sets[s.Name] = set
	}
	chains := map[string]*nftables.Chain{}
	for _, ch := range t.Chains {
		x, err := chainOf(table, ch)
		if err != nil {
			return err
		}
		chains[ch.Name] = c.AddChain(x)
	}
	for _, ch := range t.Chains {
		for i, r := range ch.Rules {
			exprs, err := exprsOf(r, sets, chains)
			if err != nil {
				return fmt.Errorf("chain %s rule %d (%s): %w", ch.Name, i, r, err)
			}
			ud := userData(r)
			if len(ud) > 256 {
				return fmt.Errorf("chain %s rule %d: tag %q is longer than nftables keeps", ch.Name, i, r.Tag)
			}
			c.AddRule(&nftables.Rule{Table: table, Chain: chains[ch.Name], UserData: []byte(ud), Exprs: exprs})
		}
	}
	return nil
}

func (k *real) Tables(f NftFamily) ([]string, error) {
	fam, err := familyOf(f)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	c, err := k.nft()
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(fam)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: list %s tables: %w", f, err)
	}
	var names []string
	for _, t := range tables {
		names = append(names, t.Name)
	}
	return names, nil
}

func (k *real) TableCounters(f NftFamily, name string) ([]NftCounter, error) {
	fam, err := familyOf(f)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: table %s: %w", name, err)
	}
	c, err := k.nft()
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	chains, err := c.ListChainsOfTableFamily(fam)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: list %s chains: %w", f, err)
	}
	table := &nftables.Table{Family: fam, Name: name}
	var out []NftCounter
	for _, ch := range chains {
		if ch.Table.Name != name {
			continue
		}
		rules, err := c.GetRules(table, ch)
		if err != nil {
			return nil, fmt.Errorf("nl: nftables: rules of %s %s %s: %w", f, name, ch.Name, err)
		}
		for _, r := range rules {
			tag, ok := tagOf(r.UserData)
			if !ok {
				continue
			}
			if p, b, ok := counted(r.Exprs); ok {
				out = append(out, NftCounter{Chain: ch.Name, Tag: tag, Packets: p, Bytes: b})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b NftCounter) int { return strings.Compare(a.Chain, b.Chain) })
	return out, nil
}
