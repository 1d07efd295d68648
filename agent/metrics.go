package agent

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (a *Agent) metrics() {
	a.reg = prometheus.NewRegistry()
	a.revision = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_plan_revision", Help: "Revision of the plan the agent holds."})
	a.appliedGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_plan_applied_revision", Help: "Revision of the last plan the datapath applied without error."})
	a.connected = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_controller_connected", Help: "1 while the plan stream is open."})
	a.applies = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_agent_datapath_applies_total", Help: "Datapath reconciles by result."}, []string{"result"})
	a.applySecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "skiff_agent_datapath_apply_seconds", Help: "Time of one datapath reconcile.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	a.pendingGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_pending_deletes", Help: "Endpoint deletes done on the node that wait for the controller."})
	writes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "skiff_agent_netlink_writes", Help: "Netlink writes made since start."}, func() float64 { return float64(a.dp.Writes()) })
	a.reg.MustRegister(a.revision, a.appliedGauge, a.connected, a.applies, a.applySecs, writes, a.pendingGauge,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	a.reg.MustRegister(newPolicyCollector(a))
	for _, c := range append(a.dp.Collectors(), a.dhcp.Collectors()...) {
		a.reg.MustRegister(c)
	}
}

func (a *Agent) serveMetrics(addr string) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	a.healthHandlers(mux)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent: --metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// policyCollector exports the policy's rule counters and how much the
// datapath has written to enforce it.
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
	cs, err := c.a.dp.Counters(c.a.current())
	for kind, n := range cs.PolicyWrites {
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(n), kind)
	}
	if err != nil {
		return
	}
	for _, x := range cs.Policy {
		pb := policyCounterPB(x)
		l := []string{x.Endpoint, pb.Direction, strconv.Itoa(x.Rule), pb.Verdict}
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(x.Packets), l...)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(x.Bytes), l...)
	}
}
