// Package agent is skiff-agent: it registers its node with the controller,
// follows the node's plan stream, keeps the last plan on disk, and makes the
// datapath match the plan whenever the plan or the kernel changes.
//
//	err := agent.Run(ctx, agent.Config{Controller: "192.0.2.10:7400", Node: "node1",
//		UnderlayIP: "192.0.2.1", StateDir: "/var/lib/skiff-agent"}, log)
//
// The datapath keeps forwarding when the agent or the controller is down: a
// restarted agent applies its saved plan, which changes nothing in a kernel
// that already matches, and resumes the plan stream from that plan's
// revision.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/agent/datapath"
	"github.com/skiff-sdn/skiff/agent/datapath/software"
	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/tlsconf"
	offloaddp "github.com/skiff-sdn/skiff/offload/datapath"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Version is reported to the controller.
const Version = "0.1.0"

// Config configures an agent.
type Config struct {
	Controller string // host:port
	Node       string
	Socket     string // local API; empty: none
	UnderlayIP string
	StateDir   string
	// Mode is auto, software or offload (see ChooseMode).
	Mode        string
	MetricsAddr string // empty: no metrics server
	// TLS: CA of the controller's certificate, and this node's client
	// certificate (common name node:NAME). All empty: plaintext.
	TLSCA, TLSCert, TLSKey string
	// StatsInterval is how often counters go to the controller (default
	// 10s).
	StatsInterval time.Duration
	// Resync is the longest time between two reconciles when nothing
	// happens (default 5m): a safety net, not a poll.
	Resync time.Duration
	// SysRoot is where sysfs is mounted ("/sys" when empty).
	SysRoot string
	// Rediscover is how long link events about NIC netdevs must settle
	// before capabilities are discovered again (default 1s).
	Rediscover time.Duration
}

// Agent is a running agent.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	client skiffv1.AgentServiceClient
	kernel nl.Kernel
	dp     datapath.Datapath
	under  netip.Addr

	mu          sync.Mutex
	plan        plan.Plan
	hasPlan     bool
	isConnected bool
	changed     chan struct{} // closed and replaced when the plan or the datapath changes
	kick        chan struct{}
	healthy     error

	evMu    sync.Mutex
	pending []*skiffv1.NodeEvent
	dropped int
	links   map[string]bool // non-Skiff links seen, for link-added events
	devs    map[string]bool // those of links that have a device/ (NICs, VFs, representors)

	disc       *eswitch.Discoverer
	capsMu     sync.Mutex
	caps       *skiffv1.NodeCapabilities
	mode       string // the mode registered (the datapath that runs)
	rediscover chan struct{}

	reg         *prometheus.Registry
	revision    prometheus.Gauge
	connected   prometheus.Gauge
	applies     *prometheus.CounterVec
	applySecs   prometheus.Histogram
	writesTotal prometheus.GaugeFunc
	off         *offloaddp.Datapath // mode offload
	fw          *nl.Firewall        // policy counters
}

func (c Config) validate() (netip.Addr, error) {
	if c.Controller == "" {
		return netip.Addr{}, errors.New("--controller is required")
	}
	if c.Node == "" {
		return netip.Addr{}, errors.New("--node is required")
	}
	ip, err := netip.ParseAddr(c.UnderlayIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--underlay-ip: %q is not an IP address", c.UnderlayIP)
	}
	if c.StateDir == "" {
		return netip.Addr{}, errors.New("--state-dir is required")
	}
	switch c.Mode {
	case "", ModeAuto, ModeSoftware, ModeOffload:
	default:
		return netip.Addr{}, fmt.Errorf("--mode: %q is not auto, software or offload", c.Mode)
	}
	return ip, nil
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	under, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if cfg.Resync == 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.StatsInterval <= 0 {
		cfg.StatsInterval = 10 * time.Second
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Rediscover <= 0 {
		cfg.Rediscover = time.Second
	}
	disc := eswitch.New(eswitch.Options{SysRoot: cfg.SysRoot, Logger: log})
	caps := DiscoverCapabilities(ctx, disc, log)
	mode, err := ChooseMode(cfg.Mode, caps)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	log.Info("node capabilities", "role", caps.GetRole(), "pfs", len(caps.GetPfs()), "modes", strings.Join(caps.GetModes(), ","), "kernel", caps.GetKernel())
	log.Info("datapath", "mode", mode)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("agent: state dir: %w", err)
	}
	k, err := nl.Open(nl.Options{})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	fw, err := nl.OpenFirewall(nl.Options{})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer fw.Close()
	creds, err := tlsconf.Client(cfg.TLSCA, cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	conn, err := grpc.NewClient(cfg.Controller, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second}))
	if err != nil {
		return fmt.Errorf("agent: controller %s: %w", cfg.Controller, err)
	}
	defer conn.Close()
	a := &Agent{cfg: cfg, log: log, client: skiffv1.NewAgentServiceClient(conn), kernel: k,
		dp: software.New(k, fw, log), under: under, kick: make(chan struct{}, 1), plan: plan.New(cfg.Node), changed: make(chan struct{}),
		disc: disc, caps: caps, mode: mode, rediscover: make(chan struct{}, 1)}
	a.fw = fw
	a.metrics()
	if mode == ModeOffload {
		if err := a.useOffload(); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		defer a.off.Close()
	}

	saved, ok, err := loadPlan(cfg.StateDir, cfg.Node)
	if err != nil {
		// A bad state file is not fatal: the controller has the truth.
		log.Error("ignoring saved plan", "err", err)
	} else if ok {
		log.Info("saved plan loaded", "revision", saved.Revision)
		a.setPlan(saved, false)
	}

	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	if cfg.MetricsAddr != "" {
		srv, err := a.serveMetrics(cfg.MetricsAddr)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if cfg.Socket != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := localapi.Serve(ctx, cfg.Socket, a, log); err != nil {
				log.Error("local API stopped", "err", err)
			}
		}()
	}
	wg.Add(6)
	go func() { defer wg.Done(); a.rediscoverLoop(ctx) }()
	go func() { defer wg.Done(); a.reportEvents(ctx) }()
	go func() { defer wg.Done(); a.reportCounters(ctx, cfg.StatsInterval) }()
	go func() { defer wg.Done(); a.watch(ctx) }()
	go func() { defer wg.Done(); a.session(ctx) }()
	go func() { defer wg.Done(); a.reconcileLoop(ctx) }()
	<-ctx.Done()
	return nil
}

func (a *Agent) nodeObject() *skiffv1.Node {
	a.capsMu.Lock()
	caps, mode := a.caps, a.mode
	a.capsMu.Unlock()
	if mode == "" {
		mode = ModeSoftware
	}
	if caps == nil {
		caps = Capabilities(nil, "")
	}
	return &skiffv1.Node{Name: a.cfg.Node, UnderlayIp: a.under.String(), Mode: mode, AgentVersion: Version,
		Capabilities: proto.Clone(caps).(*skiffv1.NodeCapabilities)}
}

func (a *Agent) current() plan.Plan {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.plan
}

// forgetRevision makes the next session ask for a snapshot.
func (a *Agent) forgetRevision() {
	a.mu.Lock()
	a.plan.Revision = 0
	a.mu.Unlock()
}

// setPlan makes p current, saves it when save is set, and asks for a
// reconcile.
func (a *Agent) setPlan(p plan.Plan, save bool) {
	a.mu.Lock()
	a.plan, a.hasPlan = p, true
	a.notifyLocked()
	a.mu.Unlock()
	a.revision.Set(float64(p.Revision))
	if save {
		if err := savePlan(a.cfg.StateDir, p); err != nil {
			a.log.Error("saving plan", "err", err)
		}
	}
	a.resync()
}

// notifyLocked wakes everyone waiting for a change. Caller holds mu.
func (a *Agent) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *Agent) setConnected(on bool) {
	a.mu.Lock()
	a.isConnected = on
	a.mu.Unlock()
	if on {
		a.connected.Set(1)
	} else {
		a.connected.Set(0)
	}
}

func (a *Agent) resync() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// reconcileLoop applies the current plan whenever asked, debounced, and at
// the latest every cfg.Resync.
func (a *Agent) reconcileLoop(ctx context.Context) {
	t := time.NewTimer(a.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-t.C:
		}
		// Let a burst of events settle into one reconcile.
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		select {
		case <-a.kick:
		default:
		}
		a.reconcile()
		t.Reset(a.cfg.Resync)
	}
}

func (a *Agent) reconcile() {
	a.mu.Lock()
	p, ok := a.plan, a.hasPlan
	a.mu.Unlock()
	if !ok {
		return // never apply a plan we do not have: that would delete everything
	}
	start := time.Now()
	err := a.dp.Apply(p)
	a.applySecs.Observe(time.Since(start).Seconds())
	a.mu.Lock()
	a.healthy = err
	a.notifyLocked()
	a.mu.Unlock()
	if err != nil {
		a.applies.WithLabelValues("error").Inc()
		a.log.Error("datapath apply", "revision", p.Revision, "err", err)
		return
	}
	a.applies.WithLabelValues("ok").Inc()
	a.log.Debug("datapath applied", "revision", p.Revision, "took", time.Since(start))
}

// watch turns kernel events into reconciles (someone deleted our bridge:
// it comes back) and reports underlay address changes and new links to the
// controller.
func (a *Agent) watch(ctx context.Context) {
	a.links, a.devs = map[string]bool{}, map[string]bool{}
	if ls, err := a.kernel.Links(); err == nil {
		for _, l := range ls {
			a.links[l.Name] = true
			a.devs[l.Name] = hasDevice(a.cfg.SysRoot, l.Name)
		}
	}
	for ctx.Err() == nil {
		err := nl.Watch(ctx, nl.Options{}, func(e nl.Event) {
			switch e.Kind {
			case "link":
				if strings.HasPrefix(e.Name, "sk") {
					a.resync()
					return
				}
				switch seen := a.links[e.Name]; {
				case e.Deleted && seen:
					if a.devs[e.Name] || a.namedInCaps(e.Name) {
						a.rediscoverSoon()
					}
					delete(a.links, e.Name)
					delete(a.devs, e.Name)
					a.event("link-removed", e.Name, "")
				case !e.Deleted && !seen && e.Name != "":
					a.links[e.Name] = true
					if a.devs[e.Name] = hasDevice(a.cfg.SysRoot, e.Name); a.devs[e.Name] {
						a.rediscoverSoon()
					}
					a.event("link-added", e.Name, "")
				}
			case "neigh":
				// Skiff's entries are static or permanent; a dynamic
				// entry changing is the kernel's business.
				if e.Static || e.Deleted {
					a.resync()
				}
			case "addr":
				if e.Addr == a.under {
					a.event("underlay-address", e.Addr.String(), map[bool]string{true: "removed", false: "added"}[e.Deleted])
				}
			}
		})
		if ctx.Err() == nil {
			// Events may have been lost (an overflow): reconcile anyway.
			a.log.Warn("netlink watch ended; restarting and resyncing", "err", err)
			a.resync()
			time.Sleep(time.Second)
		}
	}
}

func (a *Agent) metrics() {
	a.reg = prometheus.NewRegistry()
	a.revision = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_plan_revision", Help: "Revision of the plan the agent holds."})
	a.connected = prometheus.NewGauge(prometheus.GaugeOpts{Name: "skiff_agent_controller_connected", Help: "1 while the plan stream is open."})
	a.applies = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skiff_agent_datapath_applies_total", Help: "Datapath reconciles by result."}, []string{"result"})
	a.applySecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "skiff_agent_datapath_apply_seconds", Help: "Time of one datapath reconcile.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	a.writesTotal = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "skiff_agent_netlink_writes", Help: "Netlink writes made since start."}, func() float64 { return float64(a.kernel.Writes()) })
	a.reg.MustRegister(a.revision, a.connected, a.applies, a.applySecs, a.writesTotal,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	a.reg.MustRegister(newPolicyCollector(a))
}

func (a *Agent) serveMetrics(addr string) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		err, has := a.healthy, a.hasPlan
		a.mu.Unlock()
		switch {
		case err != nil:
			http.Error(w, "datapath: "+err.Error(), http.StatusServiceUnavailable)
		case !has:
			http.Error(w, "no plan yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent: --metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}
