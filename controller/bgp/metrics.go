package bgp

import (
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg        prometheus.Registerer
	sessions   *prometheus.GaugeVec
	advertised *prometheus.GaugeVec
	learned    *prometheus.GaugeVec
	changes    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Speaker) *metrics {
	m := &metrics{
		reg: reg,
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "skiff_bgp_session_established",
			Help: "1 when the BGP session with the peer is established."}, []string{"peer"}),
		advertised: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "skiff_bgp_routes_advertised",
			Help: "EVPN routes this controller originates, by route type."}, []string{"type"}),
		learned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "skiff_bgp_routes_learned",
			Help: "Usable EVPN routes learned from peers, by route type."}, []string{"type"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_bgp_session_changes_total",
			Help: "BGP session state changes, by peer."}, []string{"peer"}),
	}
	for _, p := range s.cfg.Peers {
		m.sessions.WithLabelValues(p.Address).Set(0)
	}
	for _, t := range []string{"2", "3", "5"} {
		m.advertised.WithLabelValues(t).Set(0)
	}
	for _, t := range []string{"2", "3"} {
		m.learned.WithLabelValues(t).Set(0)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sessions, m.advertised, m.learned, m.changes} {
			_ = reg.Register(c)
		}
	}
	return m
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range []prometheus.Collector{m.sessions, m.advertised, m.learned, m.changes} {
		m.reg.Unregister(c)
	}
}

func (m *metrics) peerChanged(addr netip.Addr, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.sessions.WithLabelValues(addr.String()).Set(v)
	m.changes.WithLabelValues(addr.String()).Inc()
}

func countByType(rs func(func(Route) bool)) map[string]float64 {
	c := map[string]float64{}
	rs(func(r Route) bool { c[strconv.Itoa(r.Type)]++; return true })
	return c
}

func (m *metrics) setAdvertised(adv map[string]Route) {
	c := countByType(func(yield func(Route) bool) {
		for _, r := range adv {
			yield(r)
		}
	})
	for _, t := range []string{"2", "3", "5"} {
		m.advertised.WithLabelValues(t).Set(c[t])
	}
}

func (m *metrics) setLearned(rs []Route) {
	c := countByType(func(yield func(Route) bool) {
		for _, r := range rs {
			yield(r)
		}
	})
	for _, t := range []string{"2", "3"} {
		m.learned.WithLabelValues(t).Set(c[t])
	}
}
