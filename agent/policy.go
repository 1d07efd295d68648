package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/internal/nl"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// policyCounters reads the per-rule counters of the nftables policy
// table, by endpoint. A node without the table has none.
func policyCounters(fw *nl.Firewall) (map[string][]*skiffv1.PolicyRuleCounter, error) {
	cs, err := fw.PolicyCounters()
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
	fw      *nl.Firewall
	packets *prometheus.Desc
	bytes   *prometheus.Desc
	writes  *prometheus.Desc
}

func newPolicyCollector(fw *nl.Firewall) *policyCollector {
	l := []string{"endpoint", "direction", "rule", "verdict"}
	return &policyCollector{fw: fw,
		packets: prometheus.NewDesc("skiff_agent_policy_packets_total", "Packets that opened a connection and matched a policy rule (rule -1: the default deny).", l, nil),
		bytes:   prometheus.NewDesc("skiff_agent_policy_bytes_total", "Bytes of those packets.", l, nil),
		writes:  prometheus.NewDesc("skiff_agent_policy_writes_total", "Changes to the policy table: whole-table rewrites, or set elements added and deleted.", []string{"kind"}, nil),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.writes
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.fw.PolicyWrites()
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(w.Tables), "table")
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(w.Elements), "element")
	cs, err := c.fw.PolicyCounters()
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
