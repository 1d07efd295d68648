package agent

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/agent/datapath/software"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/flower"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// reportCounters sends per-endpoint and per-network counters every
// interval until ctx ends. An endpoint's counters are its own view: what
// its host-side interface transmits, the endpoint received.
func (a *Agent) reportCounters(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req, err := a.counters()
		if err != nil {
			a.log.Warn("reading counters", "err", err)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := a.client.ReportCounters(rctx, req); err != nil {
			a.log.Debug("reporting counters", "err", err)
		}
		cancel()
	}
}

func (a *Agent) counters() (*skiffv1.ReportCountersRequest, error) {
	stats, err := a.kernel.(nl.VethAPI).Stats()
	if err != nil {
		return nil, err
	}
	p := a.current()
	var pol map[string][]*skiffv1.PolicyRuleCounter
	if src := a.policy(); src != nil && len(p.Policies) > 0 {
		if pol, err = policyCounters(src); err != nil {
			a.log.Warn("reading policy counters", "err", err)
		}
	}
	var rules map[string][]flower.State
	var polStates map[string][]flower.PolicyState
	if a.off != nil {
		rules = a.off.Rules()
		polStates = policyByEndpoint(a.off.PolicyRules())
	}
	req := &skiffv1.ReportCountersRequest{Node: a.cfg.Node, Time: timestamppb.Now()}
	for name := range p.Local {
		if s, ok := stats[software.HostIfName(name)]; ok {
			req.Endpoints = append(req.Endpoints, &skiffv1.EndpointCounters{Endpoint: name, Counters: &skiffv1.Counters{
				RxPackets: s.TxPackets, RxBytes: s.TxBytes, RxDropped: s.TxDropped,
				TxPackets: s.RxPackets, TxBytes: s.RxBytes, TxDropped: s.RxDropped}, Policy: pol[name], Rules: a.offloadRules(rules, polStates, name)})
		} else if len(rules[name]) > 0 || len(polStates[name]) > 0 {
			// A VF endpoint: no host interface, its rules only.
			req.Endpoints = append(req.Endpoints, &skiffv1.EndpointCounters{Endpoint: name, Policy: pol[name], Rules: a.offloadRules(rules, polStates, name)})
		}
	}
	for name, n := range p.Networks {
		if s, ok := stats[software.VXLANName(n.VNI)]; ok {
			req.Networks = append(req.Networks, &skiffv1.NetworkCounters{Network: name, Counters: &skiffv1.Counters{
				RxPackets: s.RxPackets, RxBytes: s.RxBytes, RxDropped: s.RxDropped,
				TxPackets: s.TxPackets, TxBytes: s.TxBytes, TxDropped: s.TxDropped}})
		}
	}
	return req, nil
}
