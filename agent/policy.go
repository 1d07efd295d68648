package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/internal/nl"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// policySource is where a node enforces policy: the nftables table
// (software datapath) or the offload datapath's tc-flower pipeline.
type policySource interface {
	// PolicyCounters reads the per-rule counters now.
	PolicyCounters() ([]nl.PolicyCounter, error)
	// PolicyWriteCounts is what enforcement has written, by kind.
	PolicyWriteCounts() map[string]int
}

// nftSource is the nftables policy table.
type nftSource struct{ fw *nl.Firewall }

func (s nftSource) PolicyCounters() ([]nl.PolicyCounter, error) { return s.fw.PolicyCounters() }

func (s nftSource) PolicyWriteCounts() map[string]int {
	w := s.fw.PolicyWrites()
	return map[string]int{"table": w.Tables, "element": w.Elements}
}

// offloadSource is the offload datapath's policy filters.
type offloadSource struct{ a *Agent }

func (s offloadSource) PolicyCounters() ([]nl.PolicyCounter, error) { return s.a.off.PolicyCounters() }

func (s offloadSource) PolicyWriteCounts() map[string]int {
	return map[string]int{"filter": s.a.off.PolicyWrites()}
}

// policy is the node's policy source: the offload datapath's when the
// agent runs it, else the nftables table; nil without either.
func (a *Agent) policy() policySource {
	switch {
	case a.off != nil:
		return offloadSource{a}
	case a.fw != nil:
		return nftSource{a.fw}
	}
	return nil
}

// policyCounters reads the per-rule counters of the node's policy, by
// endpoint. A node without policy has none.
func policyCounters(src policySource) (map[string][]*skiffv1.PolicyRuleCounter, error) {
	cs, err := src.PolicyCounters()
	if err != nil {
		return nil, err
	}
	out := map[string][]*skiffv1.PolicyRuleCounter{}
	for _, c := range cs {
		out[c.Endpoint] = append(out[c.Endpoint], policyCounterPB(c))
	}
	return out, nil
}

func policyCounterPB(c nl.PolicyCounter) *skiffv1.PolicyRuleCounter {
	dir, verdict := "ingress", "allow"
	if c.Direction == nl.PolicyEgress {
		dir = "egress"
	}
	if c.Rule < 0 {
		verdict = "drop"
	}
	return &skiffv1.PolicyRuleCounter{Direction: dir, Rule: int32(c.Rule), Verdict: verdict, Packets: c.Packets, Bytes: c.Bytes}
}

// policyCollector exports the policy table's rule counters and how much
// the agent has written to it.
type policyCollector struct {
	a       *Agent
	packets *prometheus.Desc
	bytes   *prometheus.Desc
	writes  *prometheus.Desc
}

func newPolicyCollector(a *Agent) *policyCollector {
	l := []string{"endpoint", "direction", "rule", "verdict"}
	return &policyCollector{a: a,
		packets: prometheus.NewDesc("skiff_agent_policy_packets_total", "Packets that opened a connection and matched a policy rule (rule -1: the default deny).", l, nil),
		bytes:   prometheus.NewDesc("skiff_agent_policy_bytes_total", "Bytes of those packets.", l, nil),
		writes:  prometheus.NewDesc("skiff_agent_policy_writes_total", "Changes to policy enforcement: nftables whole-table rewrites and set elements added and deleted (software datapath), or tc filters added, replaced and deleted (offload datapath).", []string{"kind"}, nil),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.writes
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.a.policy()
	if src == nil {
		return
	}
	for kind, n := range src.PolicyWriteCounts() {
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(n), kind)
	}
	cs, err := src.PolicyCounters()
	if err != nil {
		return
	}
	for _, x := range cs {
		pb := policyCounterPB(x)
		l := []string{x.Endpoint, pb.Direction, strconv.Itoa(x.Rule), pb.Verdict}
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(x.Packets), l...)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(x.Bytes), l...)
	}
}
