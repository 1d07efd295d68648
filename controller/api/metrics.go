package api

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the plan streams' Prometheus metrics. Safe for concurrent
// use (the collectors are).
type metrics struct {
	streams   prometheus.Gauge
	snapshots prometheus.Counter
	deltas    prometheus.Counter
	items     prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_controller_plan_streams",
			Help: "Plan streams open to agents on this controller."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_controller_plan_snapshots_sent_total",
			Help: "Whole plans sent to agents (a new agent, or one whose revision is no longer in the history)."}),
		deltas: prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_controller_plan_deltas_sent_total",
			Help: "Plan deltas sent to agents (empty ones included: an agent resuming in sync gets one)."}),
		items: prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_controller_plan_delta_items_sent_total",
			Help: "Items (endpoints, networks, policies, groups upserted or removed) in the deltas sent."}),
	}
}

// Register registers the plan streams' metrics, and the Go runtime's and
// the process's, with reg. Call it once.
func (s Servers) Register(reg prometheus.Registerer) error {
	m := s.Agent.metrics
	return errors.Join(
		reg.Register(m.streams), reg.Register(m.snapshots), reg.Register(m.deltas), reg.Register(m.items),
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})))
}
