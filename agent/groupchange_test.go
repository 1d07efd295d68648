package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestAgentGroupChanges: a group member change is applied to the plan the
// datapath gets; one that does not fit the agent's plan (a member removed
// that the group does not hold) is refused and the agent starts over from
// a snapshot, ending with the controller's plan.
func TestAgentGroupChanges(t *testing.T) {
	h := newHarness(t)
	a := netip.MustParseAddr
	h.ctl.change(func(p *plan.Plan) {
		p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("198.51.100.2"), a("198.51.100.3"), a("198.51.100.4")}}
	})
	rev := h.ctl.change(func(p *plan.Plan) {
		p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("198.51.100.2"), a("198.51.100.4"), a("198.51.100.5")}}
	})
	want := "[198.51.100.2 198.51.100.4 198.51.100.5]"
	h.waitApplied(rev, want)

	streams := h.ctl.streamsSeen()
	h.ctl.mu.Lock()
	bad := &skiffv1.PlanDelta{Node: "n1", FromRevision: rev, Revision: rev + 1,
		ChangeGroups: []*skiffv1.GroupChange{{Name: "g", Remove: []string{"198.51.100.9"}}}}
	for ch := range h.ctl.streams {
		ch <- &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Delta{Delta: bad}}
	}
	h.ctl.mu.Unlock()
	h.waitConnected(streams)
	h.ctl.mu.Lock()
	haves, sent := slices.Clone(h.ctl.haves), slices.Clone(h.ctl.sent)
	h.ctl.mu.Unlock()
	if haves[len(haves)-1] != 0 || sent[len(sent)-1] != fmt.Sprintf("snapshot %d", rev) {
		t.Fatalf("after a bad member change the stream opened with %v, the controller sent %v; want a snapshot", haves, sent)
	}
	h.waitApplied(rev, want)
}

// waitApplied waits until the datapath applied revision rev with group
// g's members want.
func (h *harness) waitApplied(rev int64, want string) {
	h.t.Helper()
	testkit.Eventually(h.t, fmt.Sprintf("revision %d applied with g %s", rev, want), 10*time.Second, func() (bool, string) {
		p, ok := h.dp.Applied()
		return ok && p.Revision == rev && fmt.Sprint(p.Groups["g"].Members) == want,
			fmt.Sprintf("datapath applied revision %d with g %v", p.Revision, p.Groups["g"].Members)
	})
}
