package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// DPU mode, both sides.
//
// Mode dpu: the host's endpoints arrive in this node's plan as local
// endpoints of another node (the host); the datapath attaches their VFs'
// representors in Apply. After every reconcile the agent reports each
// one's state (ReportDPUEndpoints), when it changed and after every
// reconnection; the controller puts it in the host's plan.
//
// Mode dpu-host: the plan carries the DPU's status and, per endpoint,
// the DPU's report. A create fails at once while the DPU's agent is away
// (no waiting on something that cannot come), and a create waiting for
// its endpoint fails as soon as the DPU goes away or refuses it.

// Refuser is implemented by datapaths that know an endpoint will not be
// attached by waiting (a VF with no representor): Refused says why ("":
// not refused). Safe for concurrent use.
type Refuser interface {
	Refused(endpoint string) string
}

// dpuAway says why a dpu-host's DPU cannot serve it now ("" when it can,
// or the node is no dpu-host).
func dpuAway(st plan.DPUStatus, now time.Time) string {
	switch {
	case st.Node == "" || st.Connected:
		return ""
	case !st.Registered:
		return fmt.Sprintf("this node's DPU %q has never registered with the controller (is skiff-agent --mode dpu running on it, with --node %s?)", st.Node, st.Node)
	case st.Since.IsZero():
		return fmt.Sprintf("the agent of this node's DPU %q is not connected to the controller (not seen since the controller started)", st.Node)
	}
	return fmt.Sprintf("the agent of this node's DPU %q is not connected to the controller: away for %v (since %s)",
		st.Node, now.Sub(st.Since).Round(time.Millisecond), st.Since.UTC().Format(time.RFC3339))
}

// dpuProblem says why an endpoint of a dpu-host will not become ready by
// waiting: its DPU is away, or refused it.
func (a *Agent) dpuProblem(endpoint string) error {
	p := a.current()
	if why := dpuAway(p.DPU, time.Now()); why != "" {
		return fmt.Errorf("%s", why)
	}
	if e, ok := p.Local[endpoint]; ok && e.DPUError != "" {
		return fmt.Errorf("DPU %s cannot plumb it: %s", p.DPU.Node, e.DPUError)
	}
	return nil
}

// dpuApplied records, in mode dpu, what the last Apply made of the
// host's endpoints, and wakes the reporter when that changed.
func (a *Agent) dpuApplied(p plan.Plan) {
	if a.mode != ModeDPU {
		return
	}
	ref, _ := a.dp.(Refuser)
	var reps []*skiffv1.DPUEndpointReport
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		if p.Local[name].Node == a.cfg.Node {
			continue
		}
		r := &skiffv1.DPUEndpointReport{Endpoint: name}
		r.Ready, r.Reason = a.dp.Ready(name)
		if ref != nil {
			r.Error = ref.Refused(name)
		}
		if r.Ready {
			r.Reason = ""
		}
		reps = append(reps, r)
	}
	a.dpuMu.Lock()
	same := a.dpuSent && slices.EqualFunc(reps, a.dpuRep, func(x, y *skiffv1.DPUEndpointReport) bool { return proto.Equal(x, y) })
	a.dpuRep = reps
	a.dpuMu.Unlock()
	if !same {
		a.kickDPU()
	}
}

// kickDPU asks for a DPU report (after a reconnection or a change).
func (a *Agent) kickDPU() {
	if a.mode != ModeDPU {
		return
	}
	select {
	case a.dpuSig <- struct{}{}:
	default:
	}
}

// reportDPU sends the host's endpoints' states whenever they change and
// after every reconnection, until ctx ends; a failed report is sent again
// a second later.
func (a *Agent) reportDPU(ctx context.Context) {
	reportOnSignal(ctx, a.dpuSig, func(ctx context.Context) error {
		a.dpuMu.Lock()
		req := &skiffv1.ReportDPUEndpointsRequest{Node: a.cfg.Node, Endpoints: a.dpuRep}
		known := a.dpuRep != nil || a.dpuSent
		a.dpuMu.Unlock()
		if !known {
			return nil
		}
		if _, err := a.client.ReportDPUEndpoints(ctx, req); err != nil {
			a.log.Debug("reporting the host's endpoints; retrying", "endpoints", len(req.Endpoints), "err", err)
			return err
		}
		a.dpuMu.Lock()
		a.dpuSent = true
		a.dpuMu.Unlock()
		return nil
	})
}
