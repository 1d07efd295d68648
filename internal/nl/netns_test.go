package nl_test

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// open is the kernel of namespace ns, closed when the test ends.
func open(t *testing.T, ns string) nl.Kernel {
	t.Helper()
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// TestMoveRenameConfigure moves a device (one end of a veth pair)
// between two throwaway namespaces, renames and configures it, and
// checks the errors that name a missing namespace, a missing device and a
// taken name.
func TestMoveRenameConfigure(t *testing.T) {
	a, b := testkit.New(t), testkit.New(t)
	ka, kb := open(t, a), open(t, b)
	testkit.Run(t, a, "ip", "link", "add", "skva", "type", "veth", "peer", "name", "skvb")

	if _, err := kb.LinkByName("skvb"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("LinkByName in the wrong namespace: %v", err)
	}
	if _, err := nl.Open("/var/run/netns/skt-none"); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("Open of a missing namespace: %v", err)
	}
	vb, err := ka.LinkByName("skvb")
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.SetAlias(vb.Index, "skiff:test"); err != nil {
		t.Fatal(err)
	}
	if err := ka.SetUp(vb.Index); err != nil {
		t.Fatal(err)
	}
	if err := ka.MoveLink(vb.Index, kb); err != nil {
		t.Fatal(err)
	}
	d, err := kb.LinkByName("skvb")
	if err != nil || d.Alias != "skiff:test" || d.Up {
		t.Fatalf("moved device = %+v, %v", d, err)
	}
	if err := kb.SetUp(d.Index); err != nil {
		t.Fatal(err)
	}
	if err := kb.Rename(d.Index, "net1"); err != nil { // up: set down first
		t.Fatal(err)
	}
	cfg := nl.LinkConfig{MAC: "02:5a:00:00:00:05", MTU: 1400,
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.5/24"), netip.MustParsePrefix("2001:db8::5/64")},
		Routes: []nl.LinkRoute{{Gw: netip.MustParseAddr("192.0.2.1")},
			{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gw: netip.MustParseAddr("192.0.2.2")},
			{Dst: netip.MustParsePrefix("203.0.113.0/24")}}}
	for range 2 { // idempotent
		if err := nl.Configure(kb, "net1", cfg); err != nil {
			t.Fatal(err)
		}
	}
	d, err = kb.LinkByName("net1")
	if err != nil || d.MAC != "02:5a:00:00:00:05" || d.MTU != 1400 || !d.Up {
		t.Fatalf("configured device = %+v, %v", d, err)
	}
	addrs := testkit.Run(t, b, "ip", "-o", "addr", "show", "dev", "net1")
	routes := testkit.Run(t, b, "ip", "route", "show", "dev", "net1")
	for _, want := range []string{"192.0.2.5/24", "2001:db8::5/64"} {
		if !strings.Contains(addrs, want) {
			t.Errorf("addresses lack %s:\n%s", want, addrs)
		}
	}
	for _, want := range []string{"default via 192.0.2.1", "198.51.100.0/24 via 192.0.2.2", "203.0.113.0/24 scope link"} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes lack %q:\n%s", want, routes)
		}
	}
	got, err := nl.Inspect(kb, "net1")
	if err != nil || got.MAC != "02:5a:00:00:00:05" || len(got.Addrs) != 2 || len(got.Gateway) != 1 || got.Gateway[0].String() != "192.0.2.1" {
		t.Errorf("Inspect = %+v, %v", got, err)
	}
	if err := nl.Configure(kb, "net1", nl.LinkConfig{Routes: []nl.LinkRoute{{}}}); err == nil {
		t.Error("a route with neither destination nor gateway was accepted")
	}

	// A taken name in the target: EEXIST, and the device stays.
	testkit.Run(t, a, "ip", "link", "add", "net1", "type", "veth", "peer", "name", "skvc")
	if err := kb.MoveLink(d.Index, ka); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("MoveLink onto a taken name: %v", err)
	}
	if _, err := kb.LinkByName("net1"); err != nil {
		t.Errorf("device left its namespace on a failed move: %v", err)
	}
	// Renamed back, it goes home; the move drops its addresses.
	if err := kb.Rename(d.Index, "skvb"); err != nil {
		t.Fatal(err)
	}
	if err := kb.MoveLink(d.Index, ka); err != nil {
		t.Fatal(err)
	}
	if out := testkit.Run(t, a, "ip", "-o", "addr", "show", "dev", "skvb"); strings.Contains(out, "192.0.2.5") {
		t.Errorf("addresses survived the move: %s", out)
	}
	all, err := ka.Links()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range all {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "skva") || !strings.Contains(got, "skvb") {
		t.Errorf("Links = %s", got)
	}
}

// TestSetTable: a table is created whole, written again only where it
// differs (set elements alone when only they differ, the table whole
// when a rule or chain does), not at all when it matches, and removed
// when it has no chain; another table is never touched; counters are read
// by tag.
func TestSetTable(t *testing.T) {
	ns := testkit.New(t)
	k := open(t, ns)
	testkit.Run(t, ns, "nft", "add", "table", "inet", "foreign")
	a := netip.MustParseAddr
	table := func(members ...netip.Addr) nl.NftTable {
		return nl.NftTable{Name: "sktest",
			Sets: []nl.NftSet{{Name: "g-4", Elems: members}},
			Chains: []nl.NftChain{
				{Name: "fwd", Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter, Rules: []nl.NftRule{
					{Tag: "est", Match: []nl.NftMatch{nl.CtState{Established: true, Related: true}}, Action: nl.Accept{}},
					{Match: []nl.NftMatch{nl.IfName{Out: true, Name: "skb1"}, nl.Family{}, nl.Addr{Dst: true, Prefix: netip.MustParsePrefix("198.51.100.3/32")}}, Action: nl.Jump{Chain: "in-c"}},
				}},
				{Name: "in-c", Rules: []nl.NftRule{
					{Tag: "c/0", Match: []nl.NftMatch{nl.Family{}, nl.AddrIn{Set: "g-4"}, nl.L4Proto{Proto: 6}, nl.DPort{From: 80}}, Counter: true, Action: nl.Return{}},
					{Tag: "c/drop", Counter: true, Action: nl.Drop{}},
				}},
			}}
	}
	step := func(what string, tab nl.NftTable, want nl.NftChange) {
		t.Helper()
		w := k.Writes()
		got, err := k.SetTable(tab)
		if err != nil || got != want {
			t.Fatalf("%s: %+v, %v; want %+v", what, got, err, want)
		}
		if n := k.Writes() - w; (want == nl.NftChange{}) != (n == 0) {
			t.Fatalf("%s: %d writes", what, n)
		}
	}
	step("create", table(a("198.51.100.1")), nl.NftChange{Rewritten: true})
	step("again", table(a("198.51.100.1")), nl.NftChange{})
	step("a member joins and one leaves", table(a("198.51.100.2")), nl.NftChange{Elements: 2})
	out := testkit.Run(t, ns, "nft", "list", "table", "inet", "sktest")
	for _, want := range []string{"198.51.100.2", "jump in-c", "tcp dport 80", "drop"} {
		if !strings.Contains(out, want) {
			t.Errorf("the kernel's table lacks %q:\n%s", want, out)
		}
	}
	changed := table(a("198.51.100.2"))
	changed.Chains[1].Rules[0].Match[3] = nl.DPort{From: 81}
	step("a rule changes", changed, nl.NftChange{Rewritten: true})
	cs, err := k.TableCounters(nl.NftInet, "sktest")
	if err != nil || len(cs) != 2 || cs[0].Chain != "in-c" || cs[0].Tag != "c/0" || cs[1].Tag != "c/drop" {
		t.Errorf("counters %+v, %v", cs, err)
	}
	step("no chain", nl.NftTable{Name: "sktest"}, nl.NftChange{Rewritten: true})
	step("no chain, no table", nl.NftTable{Name: "sktest"}, nl.NftChange{})
	tables, err := k.Tables(nl.NftInet)
	if err != nil || strings.Join(tables, " ") != "foreign" {
		t.Errorf("tables %v, %v; want the foreign one alone", tables, err)
	}
	bad := table()
	bad.Chains[0].Rules[1].Action = nl.Jump{Chain: "nowhere"}
	if _, err := k.SetTable(bad); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("a jump to a missing chain: %v", err)
	}
}
