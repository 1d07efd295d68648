package agent

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/datapath"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// reportCounters sends per-endpoint and per-network counters every
// interval until ctx ends.
func (a *Agent) reportCounters(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		req, err := a.counters()
		if err != nil {
			a.log.Warn("reading counters", "err", err)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := a.client.ReportCounters(rctx, req); err != nil {
			a.log.Debug("reporting counters", "err", err)
		}
		cancel()
	})
}

// counters reads the datapath's counters of the current plan as the
// controller takes them. Policy counters that cannot be read are logged
// and left out; the rest is still sent.
func (a *Agent) counters() (*skiffv1.ReportCountersRequest, error) {
	p := a.current()
	cs, err := a.dp.Counters(p)
	if err != nil && cs.Endpoints == nil {
		return nil, err
	}
	if err != nil {
		a.log.Warn("reading policy counters", "err", err)
	}
	pol := map[string][]*skiffv1.PolicyRuleCounter{}
	for _, c := range cs.Policy {
		pol[c.Endpoint] = append(pol[c.Endpoint], policyCounterPB(c))
	}
	req := &skiffv1.ReportCountersRequest{Node: a.cfg.Node, Time: timestamppb.Now()}
	for name := range p.Local {
		ec, ok := cs.Endpoints[name]
		if !ok {
			continue
		}
		x := &skiffv1.EndpointCounters{Endpoint: name, Policy: pol[name], Rules: rulesPB(ec.Rules)}
		if c := ec.Traffic; c != nil {
			x.Counters = countersPB(*c)
		}
		req.Endpoints = append(req.Endpoints, x)
	}
	for name := range p.Networks {
		if c, ok := cs.Networks[name]; ok {
			req.Networks = append(req.Networks, &skiffv1.NetworkCounters{Network: name, Counters: countersPB(c)})
		}
	}
	return req, nil
}

func countersPB(c datapath.IfCounters) *skiffv1.Counters {
	return &skiffv1.Counters{RxPackets: c.RxPackets, RxBytes: c.RxBytes, RxDropped: c.RxDropped,
		TxPackets: c.TxPackets, TxBytes: c.TxBytes, TxDropped: c.TxDropped}
}

func rulesPB(rs []datapath.Rule) []*skiffv1.OffloadRule {
	var out []*skiffv1.OffloadRule
	for _, r := range rs {
		out = append(out, &skiffv1.OffloadRule{Device: r.Device, Kind: r.Kind, Rule: r.Text, State: r.State, Reason: r.Reason,
			Handle: r.Handle, Packets: r.Packets, Bytes: r.Bytes, HwPackets: r.HWPackets, HwBytes: r.HWBytes})
	}
	return out
}

func policyCounterPB(c datapath.PolicyCounter) *skiffv1.PolicyRuleCounter {
	verdict := "allow"
	if c.Rule < 0 {
		verdict = "drop"
	}
	return &skiffv1.PolicyRuleCounter{Direction: c.Direction, Rule: int32(c.Rule), Verdict: verdict, Packets: c.Packets, Bytes: c.Bytes}
}
