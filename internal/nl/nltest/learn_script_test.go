package nltest_test

import (
	"fmt"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The conformance script's part on a bridge table that learns which
// bridge port sends to which Ethernet destination.

// learnTable is the bridge table's name: the inet table of the nftables
// part has it too, and both stay.
const learnTable = "sktest"

func learnNft() nl.NftTable {
	return nl.NftTable{Family: nl.NftBridge, Name: learnTable,
		Sets: []nl.NftSet{{Name: "seen", Key: nl.SetKeyIfNameEther, Timeout: 10 * time.Second, Size: 65536}},
		Chains: []nl.NftChain{{Name: "forward", Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter, Rules: []nl.NftRule{
			{Tag: "learn", Match: []nl.NftMatch{nl.IfName{Out: true, Name: "sklv"}, nl.EtherUnicast{}}, Action: nl.LearnPair{Set: "seen"}},
		}}}}
}

func learnScript(o *observer, k nl.Kernel, send func(port, sender, dst string)) {
	change := func(what string, t nl.NftTable) {
		before := k.Writes()
		c, err := k.SetTable(t)
		if err != nil {
			// The real handle counts a write for a transaction the
			// kernel refuses, the fake none: only the outcome is
			// compared.
			o.add("nft %s: %+v %s", what, c, errClass(err))
			return
		}
		o.add("nft %s: %+v %s writes %d", what, c, errClass(err), k.Writes()-before)
	}
	elements := func(what string, f nl.NftFamily, table, set string) []nl.NftElement {
		es, err := k.SetElements(f, table, set)
		var s []string
		for _, e := range es {
			if e.Addr.IsValid() {
				s = append(s, e.Addr.String())
				continue
			}
			s = append(s, fmt.Sprintf("%s . %s expires %v", e.IfName, e.MAC, e.Expires > 0 && e.Expires <= 10*time.Second))
		}
		o.add("elements %s: %v %s", what, s, errClass(err))
		return es
	}
	idx := func(name string) int {
		l, err := k.LinkByName(name)
		if err != nil {
			return 9999
		}
		return l.Index
	}
	o.step("learn bridge", k.AddBridge(nl.Bridge{Name: "skl0"}))
	o.step("learn pair 1", k.AddPair(nl.Pair{Name: "skl1", Peer: "skl2"}))
	o.step("learn pair v", k.AddPair(nl.Pair{Name: "sklv", Peer: "sklw"}))
	for _, n := range []string{"skl1", "sklv"} {
		o.step("learn master "+n, k.SetMaster(idx(n), idx("skl0")))
	}
	for _, n := range []string{"skl0", "skl1", "skl2", "sklv", "sklw"} {
		o.step("learn up "+n, k.SetUp(idx(n)))
	}

	change("bridge create", learnNft())
	change("bridge again", learnNft())
	elements("inet pods4", nl.NftInet, learnTable, "pods4")
	elements("bridge empty", nl.NftBridge, learnTable, "seen")
	elements("no such set", nl.NftBridge, learnTable, "nosuch")
	elements("no such table", nl.NftBridge, "nosuch", "seen")

	send("skl1", "skl2", "ff:ff:ff:ff:ff:ff")
	send("skl1", "skl2", "01:00:5e:00:00:01")
	send("skl1", "skl2", "02:00:00:00:ac:01")
	var es []nl.NftElement
	for i := 0; i < 40 && len(es) == 0; i++ {
		if es, _ = k.SetElements(nl.NftBridge, learnTable, "seen"); len(es) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	elements("learned", nl.NftBridge, learnTable, "seen")
	change("bridge again after learning", learnNft())
	elements("kept", nl.NftBridge, learnTable, "seen")

	n, err := k.DeleteSetElements(nl.NftBridge, learnTable, "seen", []nl.NftElement{
		{IfName: "skl1", MAC: "02:00:00:00:AC:01"}, {IfName: "skl1", MAC: "02:00:00:00:ac:09"}, {IfName: "skl1", MAC: "bad"}})
	o.add("delete elements: %d %s", n, errClass(err))
	before := k.Writes()
	n, err = k.DeleteSetElements(nl.NftBridge, learnTable, "seen", []nl.NftElement{{IfName: "skl1", MAC: "02:00:00:00:ac:01"}})
	o.add("delete elements again: %d %s writes %d", n, errClass(err), k.Writes()-before)
	n, err = k.DeleteSetElements(nl.NftBridge, "nosuch", "seen", []nl.NftElement{{IfName: "skl1", MAC: "02:00:00:00:ac:01"}})
	o.add("delete elements no table: %d %s", n, errClass(err))
	elements("after delete", nl.NftBridge, learnTable, "seen")

	bad := learnNft()
	bad.Chains[0].Rules[0].Action = nl.LearnPair{Set: "nosuch"}
	change("learn into missing set", bad)
	bad = learnNft()
	bad.Sets = append(bad.Sets, nl.NftSet{Name: "addrs"})
	bad.Chains[0].Rules[0].Action = nl.LearnPair{Set: "addrs"}
	change("learn into address set", bad)
	bad = learnNft()
	bad.Chains = append(bad.Chains, nl.NftChain{Name: "nat", Hook: nl.HookPostrouting, Type: nl.ChainNAT, Priority: nl.PrioritySrcNAT})
	change("bridge nat chain", bad)
	for _, a := range []nl.NftAction{nl.Masquerade{}, nl.Notrack{}, nl.OrMark{Mark: 1}} {
		bad = learnNft()
		bad.Chains[0].Rules = append(bad.Chains[0].Rules, nl.NftRule{Match: []nl.NftMatch{nl.IfName{Name: "skl1"}}, Action: a})
		change("bridge "+a.String(), bad)
	}
	changed := learnNft()
	changed.Sets[0].Timeout = 20 * time.Second
	change("bridge timeout changed", changed)
	observeNft(o, k)
	change("bridge delete", nl.NftTable{Family: nl.NftBridge, Name: learnTable})
	observeNft(o, k)
	for _, n := range []string{"skl0", "skl1", "sklv"} {
		o.step("learn delete "+n, k.DeleteLink(idx(n)))
	}
}

// observeNft records the tables of both families.
func observeNft(o *observer, k nl.Kernel) {
	for _, f := range []nl.NftFamily{nl.NftInet, nl.NftBridge} {
		tables, err := k.Tables(f)
		o.add("%s tables %v %s", f, tables, errClass(err))
	}
}
