package agent

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/agent/datapath/software"
	"github.com/skiff-sdn/skiff/internal/plan"
	offloaddp "github.com/skiff-sdn/skiff/offload/datapath"
	"github.com/skiff-sdn/skiff/offload/flower"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// useOffload makes the offload datapath the agent's: tc-flower rules on
// the representors of the node's switchdev eswitch.
func (a *Agent) useOffload() error {
	dp, err := offloaddp.New(offloaddp.Options{Logger: a.log, Representor: a.representor, TunnelHardware: true})
	if err != nil {
		return err
	}
	a.off, a.dp = dp, dp
	a.reg.MustRegister(&offloadCollector{a: a})
	return nil
}

// representor names the netdevs of a local endpoint on the eswitch. A VF
// endpoint's representor is its VF's, as discovered; when the endpoint
// was plumbed as a veth standing in for that VF (the local API's vf
// field, for NICs without VF netdevs such as netdevsim), the veth's host
// side is its target. A plain veth endpoint's host side serves as its
// representor.
func (a *Agent) representor(e plan.Endpoint) (offloaddp.Port, bool) {
	switch e.Kind {
	case plan.KindVF, plan.KindVFIO:
		a.capsMu.Lock()
		defer a.capsMu.Unlock()
		for _, pf := range a.caps.GetPfs() {
			if pf.GetName() != e.PF && pf.GetPciAddress() != e.PF {
				continue
			}
			for _, vf := range pf.GetVfs() {
				if int(vf.GetIndex()) == e.VFIndex && vf.GetRepresentor() != "" {
					return offloaddp.Port{Rep: vf.GetRepresentor(), Target: software.HostIfName(e.Name)}, true
				}
			}
		}
		return offloaddp.Port{}, false
	default:
		return offloaddp.Port{Rep: software.HostIfName(e.Name)}, true
	}
}

// offloadRules is what the controller gets for an endpoint's rules: its
// forwarding rules, then the policy filters that enforce its policy (kind
// "policy-ingress" or "policy-egress").
func (a *Agent) offloadRules(rules map[string][]flower.State, pol map[string][]flower.PolicyState, endpoint string) []*skiffv1.OffloadRule {
	var out []*skiffv1.OffloadRule
	for _, s := range rules[endpoint] {
		out = append(out, &skiffv1.OffloadRule{Device: s.Rule.Dev, Kind: s.Rule.Kind, Rule: s.Rule.String(), State: s.State,
			Reason: s.Reason, Handle: s.Handle, Packets: s.Packets, Bytes: s.Bytes, HwPackets: s.HWPackets, HwBytes: s.HWBytes})
	}
	for _, s := range pol[endpoint] {
		kind := "policy"
		if s.Rule.Direction != "" {
			kind += "-" + s.Rule.Direction
		}
		out = append(out, &skiffv1.OffloadRule{Device: s.Rule.Dev, Kind: kind, Rule: s.Rule.String(), State: s.State,
			Reason: s.Reason, Handle: s.Handle, Packets: s.Packets, Bytes: s.Bytes, HwPackets: s.HWPackets, HwBytes: s.HWBytes})
	}
	return out
}

// policyByEndpoint groups policy filter states by the endpoint whose
// policy they enforce; the pipeline's own filters go under "".
func policyByEndpoint(states []flower.PolicyState) map[string][]flower.PolicyState {
	out := map[string][]flower.PolicyState{}
	for _, s := range states {
		out[s.Rule.Endpoint] = append(out[s.Rule.Endpoint], s)
	}
	return out
}

// offloadCollector exports the offload rules as metrics, per endpoint
// (summed over its rules, so that series grow with endpoints, not rules).
type offloadCollector struct{ a *Agent }

var (
	offRules   = prometheus.NewDesc("skiff_agent_offload_rules", "Offload tc-flower rules by endpoint and state (hardware, software, refused, or empty when not installed).", []string{"endpoint", "state"}, nil)
	offPackets = prometheus.NewDesc("skiff_agent_offload_rule_packets_total", "Packets matched by an endpoint's offload rules, by rule kind (tc statistics; hardware included where offloaded).", []string{"endpoint", "kind"}, nil)
	offBytes   = prometheus.NewDesc("skiff_agent_offload_rule_bytes_total", "Bytes matched by an endpoint's offload rules, by rule kind.", []string{"endpoint", "kind"}, nil)
	offWrites  = prometheus.NewDesc("skiff_agent_offload_writes", "Netlink writes of the offload datapath since start (links, qdiscs, filters).", nil, nil)
	offPolicy  = prometheus.NewDesc("skiff_agent_offload_policy_filters", "Policy tc-flower filters (conntrack pipeline and rules) by state (hardware, software, refused, or empty when not installed).", []string{"state"}, nil)
)

func (c *offloadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- offRules
	ch <- offPackets
	ch <- offBytes
	ch <- offWrites
	ch <- offPolicy
}

func (c *offloadCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(offWrites, prometheus.GaugeValue, float64(c.a.off.Writes()))
	pol := map[string]int{}
	for _, s := range c.a.off.PolicyRules() {
		pol[s.State]++
	}
	for st, n := range pol {
		ch <- prometheus.MustNewConstMetric(offPolicy, prometheus.GaugeValue, float64(n), st)
	}
	for ep, states := range c.a.off.Rules() {
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

// offloadReady reports whether the endpoint's decap rule is installed.
func (a *Agent) offloadReady(endpoint string) (bool, string) {
	for _, s := range a.off.Rules()[endpoint] {
		if s.Rule.Kind == flower.KindDecap {
			return s.State != "", fmt.Sprintf("decap rule on %s: state %s", s.Rule.Dev, strconv.Quote(s.State))
		}
	}
	return false, "no rules yet"
}
