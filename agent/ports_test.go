package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/datapath/fake"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// TestAgentVMPorts drives VM ports through the agent's local API against
// the fake datapath: bad requests are refused with the field named and
// leave nothing at the controller or in the datapath; a port is plumbed
// by the reconcile loop before its create returns; a failed plumbing
// deletes the port again; a delete returns once the port is unplumbed,
// after the Apply that removed its rules; a restarted agent plumbs its
// ports from its saved plan.
func TestAgentVMPorts(t *testing.T) {
	h := newHarness(t, plan.KindVeth, plan.KindTap)
	h.ctl.addNetwork("blue", 100)
	ctx := context.Background()
	port := func(name, owner string) localapi.CreateRequest {
		return localapi.CreateRequest{Name: name, Network: "blue", Kind: plan.KindTap, Owner: owner, Labels: map[string]string{"app": "vm"}}
	}
	withNS := port("vm1-0", "vm:vm1")
	withNS.NetNS, withNS.IfName = h.netns, "eth0"
	withIf := port("vm1-0", "vm:vm1")
	withIf.IfName = "eth0"
	withPF := port("vm1-0", "vm:vm1")
	withPF.PF = "eth9"
	for _, bad := range []struct {
		r    localapi.CreateRequest
		want string
	}{
		{withNS, "netns:"},
		{withIf, "ifName:"},
		{withPF, "pf:"},
		{port("vm1-0", "vm1"), "owner:"},
		{port("vm1-0", "vm:"), "owner:"},
		{port("vm1-0", "pod/x"), "owner:"},
	} {
		_, err := h.a.Create(ctx, bad.r)
		var le *localapi.Error
		if !errors.As(err, &le) || le.Code != localapi.CodeInvalid || !strings.HasPrefix(le.Message, bad.want) {
			t.Errorf("create %+v: %v; want an invalid-argument error starting %q", bad.r, err, bad.want)
		}
	}
	if got := h.ctl.endpoints(); len(got) != 0 {
		t.Fatalf("refused creates left endpoints at the controller: %v", got)
	}

	r, err := h.a.Create(ctx, port("vm1-0", "vm:vm1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != plan.KindTap || r.HostIf != fake.HostIf("vm1-0") || r.MAC == "" || len(r.IPs) != 1 || len(r.Gateways) != 1 {
		t.Fatalf("create answered %+v", r)
	}
	if ok, why := h.dp.Ready("vm1-0"); !ok || !slices.Contains(h.dp.Plumbed(), "vm1-0") {
		t.Fatalf("vm1-0 not plumbed and attached when its create returned: %s", why)
	}
	list := h.a.List()
	if len(list) != 1 || list[0].Kind != plan.KindTap || list[0].Owner != "vm:vm1" || list[0].MAC != r.MAC || list[0].HostIf != r.HostIf {
		t.Fatalf("list: %+v", list)
	}

	// The datapath fails to plumb: the create fails, the port is gone.
	h.dp.FailPlumb("vm1-1", errors.New("no tap for you"))
	if _, err := h.a.Create(ctx, port("vm1-1", "vm:vm1")); err == nil || !strings.Contains(err.Error(), "no tap for you") {
		t.Fatalf("create with a failing plumb: %v", err)
	}
	if got := h.ctl.endpoints(); slices.Contains(got, "vm1-1") {
		t.Fatalf("the controller still holds vm1-1: %v", got)
	}
	if slices.Contains(h.dp.Plumbed(), "vm1-1") {
		t.Fatalf("vm1-1 is still plumbed")
	}

	// A restarted agent plumbs its ports from its saved plan.
	h.stopAgent()
	streams := h.ctl.streamsSeen()
	h.startAgent(fake.New(plan.KindVeth, plan.KindTap))
	h.waitConnected(streams)
	eventuallyPlumbed := func() bool {
		for range 100 {
			if ok, _ := h.dp.Ready("vm1-0"); ok {
				return true
			}
			<-h.dp.NextApply()
		}
		return false
	}
	if !eventuallyPlumbed() {
		t.Fatalf("the restarted agent did not plumb vm1-0: %v", h.dp.Plumbed())
	}

	// Delete returns once the port is unplumbed, which happens after the
	// Apply of the plan without it (that Apply removed its rules).
	h.dp.Calls()
	if err := h.a.Delete(ctx, localapi.DeleteRequest{Name: "vm1-0"}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.dp.Plumbed(), "vm1-0") || slices.Contains(h.ctl.endpoints(), "vm1-0") {
		t.Fatalf("vm1-0 left after its delete: plumbed %v, controller %v", h.dp.Plumbed(), h.ctl.endpoints())
	}
	without := h.a.current().Revision
	calls := h.dp.Calls()
	applied := false
	for _, c := range calls {
		if c.Op == "apply" && c.Revision >= without {
			applied = true
		}
		if c.Op == "unplumb" && c.Endpoint == "vm1-0" {
			if !applied {
				t.Fatalf("vm1-0 unplumbed before the plan without it (revision %d) was applied: %v", without, calls)
			}
			break
		}
	}
}
