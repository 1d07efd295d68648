// Package agent is skiff-agent: it registers its node with the controller,
// follows the node's plan stream, keeps the last plan on disk, makes the
// datapath match the plan whenever the plan or the kernel changes, and
// serves the local API (CNI plugin, VM managers) by asking the datapath to
// plumb endpoints.
//
// The agent runs on whatever datapath its caller chose (software, offload,
// or the fake in tests) and never asks which one it is:
//
//	dp := software.New(k, fw, log)
//	err := agent.Run(ctx, agent.Config{Controller: "192.0.2.10:7400", Node: "node1",
//		UnderlayIP: "192.0.2.1", StateDir: "/var/lib/skiff-agent"},
//		agent.Deps{Datapath: dp, Mode: agent.ModeSoftware, Logger: log})
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
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/agent/dhcp"
	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/agent/planfile"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/dialer"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Version is reported to the controller.
const Version = "0.1.0"

// Config configures an agent.
type Config struct {
	// Controller is host:port of the controller, several separated by
	// commas (replicas), or dns:///name:port (internal/dialer): the agent
	// uses one and fails over to another.
	Controller string
	Node       string
	Socket     string // local API's unix socket; empty: none
	// LocalAPI serves the local API over gRPC on TCP too (for example a
	// DPU's agent, reached by its host's CNI), with mTLS: LocalAPITLS
	// must be set.
	LocalAPI    string
	LocalAPITLS localapi.TLS
	UnderlayIP  string
	// HostIP is the node's own address of the other family than
	// UnderlayIP (a dual-stack node's), optional: with it, the node's
	// own traffic reaches pods over that family too (host ports). It
	// may be the node's addresses, comma-separated (Kubernetes'
	// status.hostIPs): one of UnderlayIP's family must then be
	// UnderlayIP.
	HostIP   string
	StateDir string
	// Mode is auto, software, offload, dpu or dpu-host (see
	// ChooseMode); the caller chooses the datapath from it.
	Mode string
	// DPU is, in mode dpu-host, the node whose agent (mode dpu) plumbs
	// this host's VFs' representors (required there, refused elsewhere).
	DPU string
	// VFTable, in modes dpu and dpu-host, replaces sysfs discovery of
	// VFs and representors by a file (datapath/vftable): for
	// benches without SR-IOV. The caller reads it.
	VFTable string
	// Encap, in modes offload and dpu: "learned" (empty too) gives a
	// representor an encap rule for each remote endpoint its endpoint
	// sends to, "all" one for every remote endpoint of its network.
	Encap       string
	MetricsAddr string // empty: no metrics server
	// TLS: CA of the controller's certificate, and this node's client
	// certificate (common name node:NAME). All empty: plaintext. The
	// certificate is read again when its files change, and renewed
	// through the controller before it expires (install.go).
	TLSCA, TLSCert, TLSKey string
	// TLSServerName, when set, is the name checked in the controller's
	// certificate instead of the address dialled (a Service's name).
	TLSServerName string
	// CNI, when set, installs skiff-cni and its configuration once the
	// controller is connected and the network exists (install.go).
	CNI *CNIInstall
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

// Deps are what the agent runs on; its caller chooses them.
type Deps struct {
	// Datapath executes plans and plumbs endpoints (required).
	Datapath datapath.Datapath
	// Mode is the mode Datapath implements, as the node registers it.
	Mode string
	// Kernel watches the node's links, neighbours and addresses; the
	// current namespace's (internal/nl) when nil.
	Kernel Kernel
	// Discover returns the node's capabilities now; the first answer is
	// taken at start, later ones after NIC netdevs come or go. Nil: a
	// node without PFs (software only).
	Discover func(ctx context.Context) *skiffv1.NodeCapabilities
	// VFByPCI finds a VF of this node by PCI address (a CNI's deviceID);
	// nil: deviceIDs are refused. VFByPCIFrom makes one.
	VFByPCI func(ctx context.Context, pci string) (LocalVF, error)
	// DialOptions are added when dialing the controller (tests).
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	// DHCP answers VM ports' guests; one listening on the ports' host
	// interfaces in the agent's namespace when nil.
	DHCP *dhcp.Responder
}

// Kernel is what the agent itself reads of the kernel: which links exist,
// and their changes. Watch calls fn on its own goroutine until ctx ends or
// the subscription breaks (events may then have been lost).
type Kernel interface {
	Links() ([]nl.Link, error)
	Watch(ctx context.Context, fn func(nl.Event)) error
}

// nlKernel is Kernel on internal/nl, in the current namespace.
type nlKernel struct{}

func (nlKernel) Links() ([]nl.Link, error) {
	k, err := nl.Open("")
	if err != nil {
		return nil, err
	}
	defer k.Close()
	return k.Links()
}

func (nlKernel) Watch(ctx context.Context, fn func(nl.Event)) error {
	k, err := nl.Open("")
	if err != nil {
		return err
	}
	defer k.Close()
	return k.Watch(ctx, fn)
}

// Agent is a running agent.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	conn   *grpc.ClientConn
	client skiffv1.AgentServiceClient
	kernel Kernel
	dp     datapath.Datapath
	under  netip.Addr
	host   netip.Addr     // the host address (Config.HostIP), or zero
	saved  *planfile.File // the plan kept in StateDir (safe for concurrent use)

	mu          sync.Mutex
	plan        plan.Plan
	hasPlan     bool
	isConnected bool
	changed     chan struct{} // closed and replaced when the plan or the datapath changes
	kick        chan struct{}
	kickNow     chan struct{} // someone waits on the reconcile: no settling
	healthy     error
	hs          health
	cniErr      error         // why the CNI is not installed (Config.CNI); nil once it is
	cniSig      chan struct{} // a connection: try the CNI install
	certSig     chan struct{} // a connection: check the certificate

	evMu    sync.Mutex
	pending []*skiffv1.NodeEvent
	dropped int
	links   map[string]bool // non-Skiff links seen, for link-added events
	devs    map[string]bool // those of links that have a device/ (NICs, VFs, representors)

	discover   func(ctx context.Context) *skiffv1.NodeCapabilities
	vfByPCI    func(ctx context.Context, pci string) (LocalVF, error)
	capsMu     sync.Mutex
	caps       *skiffv1.NodeCapabilities
	mode       string // the mode registered (the datapath that runs)
	rediscover chan struct{}

	// VM ports as plumbed by the reconcile loop (ports.go).
	portMu     sync.Mutex
	ports      map[string]*vmPort
	portsKnown bool          // a reconcile has run
	portsRev   int64         // the plan revision ports were last plumbed from
	portsSig   chan struct{} // wakes the port reporter
	dhcp       *dhcp.Responder

	// Deletes the controller has not confirmed (pending.go).
	pendMu       sync.Mutex
	pend         map[string]pendingDelete
	pendSig      chan struct{}
	pendOp       sync.RWMutex // creates (read) against the pending loop's deletes (write)
	pendingGauge prometheus.Gauge

	// Mode dpu: what was last reported of the host's endpoints (dpu.go).
	dpuMu   sync.Mutex
	dpuRep  []*skiffv1.DPUEndpointReport
	dpuSent bool
	dpuSig  chan struct{}

	reg      *prometheus.Registry
	revision prometheus.Gauge
	// appliedRev is the last plan the datapath applied without error
	// (under mu); appliedGauge reports it.
	appliedRev   int64
	appliedGauge prometheus.Gauge
	connected    prometheus.Gauge
	applies      *prometheus.CounterVec
	applySecs    prometheus.Histogram
}

func (c Config) validate() (netip.Addr, error) {
	if _, err := dialer.Parse(c.Controller); err != nil {
		return netip.Addr{}, err
	}
	if c.Node == "" {
		return netip.Addr{}, errors.New("--node is required")
	}
	ip, err := netip.ParseAddr(c.UnderlayIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--underlay-ip: %q is not an IP address", c.UnderlayIP)
	}
	if _, err := hostIP(c.HostIP, ip); err != nil {
		return netip.Addr{}, err
	}
	if c.StateDir == "" {
		return netip.Addr{}, errors.New("--state-dir is required")
	}
	switch c.Mode {
	case "", ModeAuto, ModeSoftware, ModeOffload, ModeDPU, ModeDPUHost:
	default:
		return netip.Addr{}, fmt.Errorf("--mode: %q is not auto, software, offload, dpu or dpu-host", c.Mode)
	}
	switch {
	case c.Mode == ModeDPUHost && c.DPU == "":
		return netip.Addr{}, errors.New("--dpu: required in mode dpu-host (the node name of this host's DPU)")
	case c.Mode != ModeDPUHost && c.DPU != "":
		return netip.Addr{}, fmt.Errorf("--dpu: only in mode dpu-host, not %q", c.Mode)
	}
	if c.LocalAPI != "" && !c.LocalAPITLS.Set() {
		return netip.Addr{}, errors.New("--local-api-listen: needs --local-api-tls-cert, --local-api-tls-key and --local-api-client-ca (the TCP local API is mTLS only)")
	}
	return ip, nil
}

// hostIP returns the host address in list (Config.HostIP), given the
// underlay address under: its address of the other family, if any.
func hostIP(list string, under netip.Addr) (netip.Addr, error) {
	var host netip.Addr
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		switch {
		case err != nil:
			return netip.Addr{}, fmt.Errorf("--host-ip: %q is not an IP address", f)
		case a.Is4() == under.Is4() && a != under:
			return netip.Addr{}, fmt.Errorf("--host-ip: %s is of --underlay-ip %s's family and not it; give the node's address of the other family", a, under)
		case a.Is4() != under.Is4() && host.IsValid() && a != host:
			return netip.Addr{}, fmt.Errorf("--host-ip: %s and %s: one address of the other family than --underlay-ip, not two", host, a)
		case a.Is4() != under.Is4():
			host = a
		}
	}
	return host, nil
}

// Run runs an agent on d until ctx ends (New, then Agent.Run). It closes
// nothing of d.
func Run(ctx context.Context, cfg Config, d Deps) error {
	a, err := New(ctx, cfg, d)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New checks cfg, dials the controller (lazily: an absent controller is
// not an error) and loads the saved plan.
func New(ctx context.Context, cfg Config, d Deps) (*Agent, error) {
	under, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	host, _ := hostIP(cfg.HostIP, under) // checked by validate
	if d.Datapath == nil {
		return nil, errors.New("agent: no datapath")
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if d.Kernel == nil {
		d.Kernel = nlKernel{}
	}
	if d.Discover == nil {
		d.Discover = func(context.Context) *skiffv1.NodeCapabilities { return Capabilities(nil, "") }
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
	if d.Mode == "" {
		d.Mode = ModeSoftware
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: state dir: %w", err)
	}
	conn, err := dialController(cfg, d.DialOptions)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if d.DHCP == nil {
		d.DHCP = dhcp.NewResponder(dhcp.Options{Logger: log})
	}
	a := &Agent{cfg: cfg, log: log, conn: conn, client: skiffv1.NewAgentServiceClient(conn), kernel: d.Kernel, dp: d.Datapath,
		under: under, host: host, kick: make(chan struct{}, 1), kickNow: make(chan struct{}, 1), plan: plan.New(cfg.Node), changed: make(chan struct{}),
		discover: d.Discover, vfByPCI: d.VFByPCI, caps: proto.Clone(d.Discover(ctx)).(*skiffv1.NodeCapabilities), mode: d.Mode,
		rediscover: make(chan struct{}, 1), ports: map[string]*vmPort{}, portsSig: make(chan struct{}, 1), dhcp: d.DHCP,
		pendSig: make(chan struct{}, 1), cniSig: make(chan struct{}, 1), certSig: make(chan struct{}, 1),
		dpuSig: make(chan struct{}, 1)}
	a.metrics()
	if a.pend, err = loadPending(cfg.StateDir); err != nil {
		// The endpoints stay in the controller until an adapter's garbage
		// collection or an operator deletes them.
		log.Error("ignoring pending deletes", "err", err)
		a.pend = map[string]pendingDelete{}
	}
	if len(a.pend) > 0 {
		log.Info("deletes wait for the controller", "endpoints", slices.Sorted(maps.Keys(a.pend)))
	}
	a.pendingGauge.Set(float64(len(a.pend)))

	a.saved = planfile.Open(cfg.StateDir, cfg.Node, log)
	saved, ok, err := a.saved.Load()
	if err != nil {
		// A bad state file is not fatal: the controller has the truth.
		log.Error("ignoring saved plan", "err", err)
	} else if ok {
		log.Info("saved plan loaded", "revision", saved.Revision)
		a.setPlan(saved, nil, false)
	}
	return a, nil
}

// Run serves until ctx ends: the controller session, reconciles, the
// local API, events, counters and metrics. It closes the controller
// connection when it returns.
func (a *Agent) Run(ctx context.Context) error {
	defer a.conn.Close()
	defer a.dhcp.Close()
	defer a.saved.Close()
	cfg, log := a.cfg, a.log
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
	api := localapi.Server{Backend: a, Logger: log}
	if cfg.Socket != "" {
		l, err := localapi.ListenUnix(cfg.Socket)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		wg.Go(func() {
			if err := api.Serve(ctx, l); err != nil {
				log.Error("local API stopped", "err", err)
			}
		})
		log.Info("local API listening", "socket", cfg.Socket)
	}
	if cfg.LocalAPI != "" {
		l, err := localapi.ListenTLS(cfg.LocalAPI, cfg.LocalAPITLS)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		wg.Go(func() {
			if err := api.Serve(ctx, l); err != nil {
				log.Error("local API (TCP) stopped", "err", err)
			}
		})
		log.Info("local API listening", "addr", l.Addr().String(), "tls", true)
	}
	wg.Go(func() { a.rediscoverLoop(ctx) })
	wg.Go(func() { a.reportEvents(ctx) })
	wg.Go(func() { a.reportCounters(ctx, cfg.StatsInterval) })
	wg.Go(func() { a.reportPorts(ctx) })
	wg.Go(func() { a.reportDPU(ctx) })
	wg.Go(func() { a.watch(ctx) })
	wg.Go(func() { a.session(ctx) })
	wg.Go(func() { a.reconcileLoop(ctx) })
	if l, ok := a.dp.(datapath.Learner); ok {
		wg.Go(func() { a.learnLoop(ctx, l) })
	}
	wg.Go(func() { a.pendingLoop(ctx) })
	if cfg.CNI != nil {
		wg.Go(func() { a.installCNI(ctx) })
	}
	if cfg.TLSCert != "" {
		wg.Go(func() { a.renewCertificate(ctx) })
	}
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
	return &skiffv1.Node{Name: a.cfg.Node, UnderlayIp: a.under.String(), HostIp: a.hostString(), Mode: mode, AgentVersion: Version,
		Capabilities: proto.Clone(caps).(*skiffv1.NodeCapabilities), Dpu: a.cfg.DPU}
}

// hostString is the host address as registered ("" when none).
func (a *Agent) hostString() string {
	if !a.host.IsValid() {
		return ""
	}
	return a.host.String()
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

// setPlan makes p current, saves it when save is set (the delta d that
// made it, appended; the whole plan when d is nil), and asks for a
// reconcile.
func (a *Agent) setPlan(p plan.Plan, d *skiffv1.PlanDelta, save bool) {
	a.mu.Lock()
	a.plan, a.hasPlan = p, true
	a.notifyLocked()
	a.mu.Unlock()
	a.revision.Set(float64(p.Revision))
	if save {
		var err error
		if d != nil {
			err = a.saved.Append(p, d)
		} else {
			err = a.saved.Snapshot(p)
		}
		if err != nil {
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
		a.kickPending()
		a.kickCNI()
		select {
		case a.certSig <- struct{}{}:
		default:
		}
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

// resyncNow asks for a reconcile that someone waits on (a local API create
// whose endpoint must be attached): it starts without letting events
// settle first.
func (a *Agent) resyncNow() {
	select {
	case a.kickNow <- struct{}{}:
	default:
	}
}

// reconcileLoop applies the current plan whenever asked, debounced unless
// asked by resyncNow, and at the latest every cfg.Resync.
func (a *Agent) reconcileLoop(ctx context.Context) {
	t := time.NewTimer(a.cfg.Resync)
	defer t.Stop()
	for {
		now := false
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-a.kickNow:
			now = true
		case <-t.C:
		}
		if !now {
			// Let a burst of events settle into one reconcile.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-a.kickNow:
			case <-ctx.Done():
				return
			}
		}
		// What asked while this one was pending is served by it.
		select {
		case <-a.kick:
		default:
		}
		select {
		case <-a.kickNow:
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
	a.mu.Lock()
	a.hs.applyingSince = start
	a.mu.Unlock()
	a.plumbPorts(p)
	err := a.dp.Apply(p)
	a.releasePorts(p)
	a.portsApplied(p)
	a.dpuApplied(p)
	a.applySecs.Observe(time.Since(start).Seconds())
	a.mu.Lock()
	a.healthy = err
	a.hs.applyingSince, a.hs.applied = time.Time{}, true
	a.notifyLocked()
	a.mu.Unlock()
	if err != nil {
		a.applies.WithLabelValues("error").Inc()
		a.log.Error("datapath apply", "revision", p.Revision, "err", err)
		return
	}
	a.mu.Lock()
	a.appliedRev = p.Revision
	a.mu.Unlock()
	a.appliedGauge.Set(float64(p.Revision))
	a.applies.WithLabelValues("ok").Inc()
	a.log.Debug("datapath applied", "revision", p.Revision, "took", time.Since(start))
}
