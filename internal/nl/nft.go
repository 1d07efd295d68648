package nl

import (
	"fmt"
	"slices"
	"sync"

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

// SetIsolation makes the forward path drop what is routed from one of the
// given bridges into another Skiff bridge ("skb" prefix): tenant networks
// stay apart even on a node that forwards. Bridged traffic inside one
// network is untouched. It writes nothing when the rules already match,
// and otherwise replaces them in one atomic transaction. An empty list
// removes the table.
func (f *Firewall) SetIsolation(bridges []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("nl: nftables: %w", err)
	}
	want := slices.Clone(bridges)
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
	// deleting it drops the old chain and rules, all in one transaction.
	c.AddTable(table)
	if exists {
		c.DelTable(table)
		c.AddTable(table)
	}
	accept := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{Name: NftIsolationChain, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	for _, b := range want {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, UserData: []byte(b), Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(b)},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte("skb")},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(b)},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	f.writes++
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nl: nftables: isolation rules: %w", err)
	}
	return nil
}

// current returns the bridges the isolation chain has rules for.
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
