package agent

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
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
		for _, part := range reportParts(req, reportPartBytes) {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := a.client.ReportCounters(rctx, part)
			cancel()
			if err != nil {
				a.log.Debug("reporting counters", "part", part.Part, "err", err)
				return
			}
		}
	})
}

// reportPartBytes bounds one part of a counters report, well below
// gRPC's 4 MiB message limit: an offload node of 250 endpoints reports
// 125,000 rule states, tens of MiB.
const reportPartBytes = 1 << 20

// reportParts splits req into parts of at most about max bytes each
// (an endpoint is never split), numbered from 0; the networks go in
// part 0.
func reportParts(req *skiffv1.ReportCountersRequest, max int) []*skiffv1.ReportCountersRequest {
	part := func(n int) *skiffv1.ReportCountersRequest {
		return &skiffv1.ReportCountersRequest{Node: req.Node, Time: req.Time, Part: uint32(n)}
	}
	cur := part(0)
	cur.Networks = req.Networks
	out := []*skiffv1.ReportCountersRequest{cur}
	size := proto.Size(cur)
	for _, e := range req.Endpoints {
		n := proto.Size(e)
		if size+n > max && len(cur.Endpoints) > 0 {
			cur = part(len(out))
			out = append(out, cur)
			size = proto.Size(cur)
		}
		cur.Endpoints = append(cur.Endpoints, e)
		size += n
	}
	return out
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
