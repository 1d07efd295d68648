package dhcp

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Port is a VM port as the responder serves it: the host-side interface
// its guest's frames arrive on, and the guest's lease.
type Port struct {
	Endpoint  string
	Interface string
	Lease     Lease
}

// Options configure a Responder.
type Options struct {
	Logger *slog.Logger
	// Listen opens a port's link; Listen (a packet socket in the
	// caller's namespace) when nil.
	Listen func(ifname string) (Conn, int, error)
	// Index returns an interface's current index, to notice a link
	// that was deleted and made again; net.InterfaceByName when nil.
	Index func(ifname string) (int, error)
}

// Responder answers DHCPv4 on the host interfaces of VM ports. Set and
// Close are safe for concurrent use.
type Responder struct {
	log    *slog.Logger
	listen func(string) (Conn, int, error)
	index  func(string) (int, error)

	mu     sync.Mutex
	ports  map[string]*served // by interface
	closed bool

	replies *prometheus.CounterVec
	ignored *prometheus.CounterVec
	latency prometheus.Histogram
	served  prometheus.Gauge
}

// served is one interface being listened on.
type served struct {
	ifindex int
	conn    Conn
	done    chan struct{} // closed when its loop ends

	mu   sync.Mutex
	port Port
}

func (s *served) current() Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

func (s *served) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// NewResponder returns a responder serving no port yet.
func NewResponder(o Options) *Responder {
	r := &Responder{log: o.Logger, listen: o.Listen, index: o.Index, ports: map[string]*served{},
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_agent_dhcp_replies_total",
			Help: "DHCPv4 answers sent to VM ports' guests, by type (OFFER, ACK, NAK)."}, []string{"type"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_agent_dhcp_ignored_total",
			Help: "DHCPv4 frames seen on VM ports that got no answer, by reason (unknown-mac, relayed, other-server, ...)."}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "skiff_agent_dhcp_answer_seconds",
			Help:    "Time from a DHCPv4 request read off a VM port to its answer written back.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 8)}),
		served: prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_dhcp_ports", Help: "VM port interfaces the DHCPv4 responder listens on."}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.listen == nil {
		r.listen = Listen
	}
	if r.index == nil {
		r.index = func(name string) (int, error) {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return 0, err
			}
			return ifi.Index, nil
		}
	}
	return r
}

// Collectors are the responder's metrics.
func (r *Responder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.replies, r.ignored, r.latency, r.served}
}

// Set makes the responder serve exactly ports (level-triggered): it
// listens on new interfaces, stops listening on those no port has, and
// serves changed leases from now on. A port without an IPv4 address (an
// L2-only network) is not served. It returns the errors of interfaces it
// could not listen on, joined; it tries those again at the next Set.
func (r *Responder) Set(ports []Port) error {
	want := map[string]Port{}
	for _, p := range ports {
		if p.Lease.Validate() == nil {
			want[p.Interface] = p
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("dhcp: responder closed")
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(r.ports)) {
		s := r.ports[name]
		_, keep := want[name]
		if keep && s.alive() {
			// The same link still: a tap deleted and made again has a
			// new index, and the old socket hears nothing.
			if idx, err := r.index(name); err == nil && idx == s.ifindex {
				continue
			}
		}
		s.conn.Close()
		<-s.done
		delete(r.ports, name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		p := want[name]
		if s, ok := r.ports[name]; ok {
			s.mu.Lock()
			s.port = p
			s.mu.Unlock()
			continue
		}
		conn, idx, err := r.listen(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", p.Endpoint, err))
			continue
		}
		s := &served{ifindex: idx, conn: conn, done: make(chan struct{}), port: p}
		r.ports[name] = s
		go r.serve(s)
		r.log.Debug("dhcp: serving port", "endpoint", p.Endpoint, "interface", name, "mac", p.Lease.MAC, "addr", p.Lease.Addr)
	}
	r.served.Set(float64(len(r.ports)))
	return errors.Join(errs...)
}

// Close stops serving every port.
func (r *Responder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for name, s := range r.ports {
		s.conn.Close()
		<-s.done
		delete(r.ports, name)
	}
	r.served.Set(0)
}

// serve answers what arrives on one port until its link is closed or
// breaks (the interface went away; Set listens again if it comes back).
func (r *Responder) serve(s *served) {
	defer close(s.done)
	buf := make([]byte, 9000)
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p := s.current()
				r.log.Warn("dhcp: port link broke; listening again at the next reconcile", "endpoint", p.Endpoint, "interface", p.Interface, "err", err)
			}
			return
		}
		start := time.Now()
		p := s.current()
		src, req, err := ParseFrame(buf[:n])
		if err != nil {
			r.ignored.WithLabelValues(IgnoreMalformed).Inc()
			continue
		}
		resp, err := Answer(req, src, p.Lease)
		if err != nil {
			var ig *Ignored
			reason := IgnoreMalformed
			if errors.As(err, &ig) {
				reason = ig.Reason
			}
			r.ignored.WithLabelValues(reason).Inc()
			r.log.Debug("dhcp: request ignored", "endpoint", p.Endpoint, "type", requestType(req.MessageType()), "mac", src, "reason", reason)
			continue
		}
		if err := s.conn.Write(BuildReply(resp, req, p.Lease.ServerMAC, p.Lease.serverID())); err != nil {
			r.log.Warn("dhcp: sending answer", "endpoint", p.Endpoint, "interface", p.Interface, "err", err)
			continue
		}
		r.latency.Observe(time.Since(start).Seconds())
		r.replies.WithLabelValues(resp.MessageType().String()).Inc()
		r.log.Debug("dhcp: answered", "endpoint", p.Endpoint, "request", requestType(req.MessageType()), "reply", resp.MessageType(),
			"addr", resp.YourIPAddr, "took", time.Since(start))
	}
}
