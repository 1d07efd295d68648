package flower

import (
	"log/slog"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// The forwarding programmer reads chain 0 whole, past the policy
// pipeline's fw filter (which has no terse form: a terse dump ends at
// it): a forwarding filter of Skiff's left in chain 0 after it is found
// and deleted by the next Sync, and the fw filter stays.
func TestSyncReadsEntryChainPastFw(t *testing.T) {
	w := nltest.New()
	dev := w.AddDevice(nltest.Device{Name: "skh100", Up: true})
	k, err := w.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	c, err := k.TC(1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddClsact(dev.Index); err != nil {
		t.Fatal(err)
	}
	pc, err := OpenPolicy(k)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	reply := PolicyRule{Dev: "skh100", Index: dev.Index, Chain: ChainEntry, Prio: PrioEntryReply, Match: PolicyMatch{EthType: EthAll, Mark: ReplyMark},
		Actions: []PolicyAction{{Kind: PolicyGoto, Chain: ChainForward}}}
	if err := pc.Add(reply, flagSkipHW); err != nil {
		t.Fatal(err)
	}
	// A forwarding filter of Skiff's in chain 0, after the fw filter.
	old := tc.Filter{Ifindex: dev.Index, Chain: ChainEntry, Prio: PrioARP, Proto: unix.ETH_P_ARP, Handle: 1, Kind: "flower",
		Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT, Cookie: cookie("old", "old rule")}}}
	if err := c.Do(tc.Op{Kind: tc.Add, Filter: &old}); err != nil {
		t.Fatal(err)
	}
	p, err := Open(k, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Sync(map[string]Device{"skh100": {Name: "skh100", Index: dev.Index}}, nil); err != nil {
		t.Fatal(err)
	}
	fs := w.NS("").Filters("skh100")
	if len(fs) != 1 || fs[0].Kind != tc.KindFw {
		t.Errorf("after Sync the device holds %v; want the fw filter alone", fs)
	}
}
