package kube

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	leader    prometheus.Gauge
	errors    *prometheus.CounterVec
	collected prometheus.Counter
	refused   prometheus.Gauge
	mismatch  *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_kube_leader", Help: "1 while this replica runs the Kubernetes adapter (holds its Lease)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_kube_sync_errors_total",
			Help: "Syncs of Kubernetes objects to Skiff that failed and were retried, by queue."}, []string{"queue"}),
		collected: prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_kube_collected_endpoints_total",
			Help: "Endpoints freed because their pod left the API without a CNI DEL."}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_kube_policies_refused",
			Help: "NetworkPolicies whose current version Skiff refused (see their Events)."}),
		mismatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "skiff_kube_node_underlay_mismatch",
			Help: "1 for a Node whose InternalIP is not the underlay address its agent registered."}, []string{"node"}),
	}
	if r != nil {
		r.MustRegister(m.leader, m.errors, m.collected, m.refused, m.mismatch)
	}
	return m
}
