package offload

import "github.com/prometheus/client_golang/prometheus"

// collector exports the offload rules as metrics, per endpoint (summed over
// its rules, so that series grow with endpoints, not rules).
type collector struct{ d *Datapath }

var (
	offRules   = prometheus.NewDesc("skiff_agent_offload_rules", "Offload tc-flower rules by endpoint and state (hardware, software, refused, or empty when not installed).", []string{"endpoint", "state"}, nil)
	offPackets = prometheus.NewDesc("skiff_agent_offload_rule_packets_total", "Packets matched by an endpoint's offload rules, by rule kind (tc statistics; hardware included where offloaded).", []string{"endpoint", "kind"}, nil)
	offBytes   = prometheus.NewDesc("skiff_agent_offload_rule_bytes_total", "Bytes matched by an endpoint's offload rules, by rule kind.", []string{"endpoint", "kind"}, nil)
	offWrites  = prometheus.NewDesc("skiff_agent_offload_writes", "Netlink writes of the offload datapath since start (links, qdiscs, filters).", nil, nil)
	offRefused = prometheus.NewDesc("skiff_agent_offload_network_refused", "1 for each network the offload datapath cannot express on this node (its endpoints here get no rules; the reason is in the agent's log and each endpoint's rule states).", []string{"network"}, nil)
	offSends   = prometheus.NewDesc("skiff_agent_offload_encap_learnt", "Pairs (local endpoint, remote endpoint) with an encap rule learnt from traffic (encap rules on demand).", nil, nil)
	offLearnt  = prometheus.NewDesc("skiff_agent_offload_encap_learnt_total", "Pairs learnt from traffic since start, by what became of them: learnt, or removed as idle.", []string{"event"}, nil)
	offPolicy  = prometheus.NewDesc("skiff_agent_offload_policy_filters", "Policy tc-flower filters (conntrack pipeline and rules) by state (hardware, software, refused, or empty when not installed).", []string{"state"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- offRules
	ch <- offPackets
	ch <- offBytes
	ch <- offWrites
	ch <- offPolicy
	ch <- offRefused
	ch <- offSends
	ch <- offLearnt
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(offWrites, prometheus.GaugeValue, float64(c.d.Writes()))
	if c.d.learn != nil {
		pairs, learnt, idle := c.d.LearnStats()
		ch <- prometheus.MustNewConstMetric(offSends, prometheus.GaugeValue, float64(pairs))
		ch <- prometheus.MustNewConstMetric(offLearnt, prometheus.CounterValue, float64(learnt), "learnt")
		ch <- prometheus.MustNewConstMetric(offLearnt, prometheus.CounterValue, float64(idle), "idle")
	}
	for n := range c.d.RefusedNetworks() {
		ch <- prometheus.MustNewConstMetric(offRefused, prometheus.GaugeValue, 1, n)
	}
	pol := map[string]int{}
	for _, s := range c.d.PolicyRules() {
		pol[s.State]++
	}
	for st, n := range pol {
		ch <- prometheus.MustNewConstMetric(offPolicy, prometheus.GaugeValue, float64(n), st)
	}
	for ep, states := range c.d.Rules() {
		count := map[string]int{}
		pk, by := map[string]uint64{}, map[string]uint64{}
		for _, s := range states {
			count[s.State]++
			pk[s.Rule.Kind] += s.Packets
			by[s.Rule.Kind] += s.Bytes
		}
		for st, n := range count {
			ch <- prometheus.MustNewConstMetric(offRules, prometheus.GaugeValue, float64(n), ep, st)
		}
		for k, v := range pk {
			ch <- prometheus.MustNewConstMetric(offPackets, prometheus.CounterValue, float64(v), ep, k)
			ch <- prometheus.MustNewConstMetric(offBytes, prometheus.CounterValue, float64(by[k]), ep, k)
		}
	}
}
