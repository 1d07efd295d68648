// Package controller runs skiff-controller: etcd (embedded, or an external
// cluster), the object store, the planner fed by an etcd watch, and the gRPC
// API. Several controllers may share one external etcd: each keeps its own
// planner from the same watch, so any of them can serve any agent.
//
//	err := controller.Run(ctx, controller.Config{Listen: "127.0.0.1:7400", DataDir: "/var/lib/skiff"}, log)
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/controller/api"
	"github.com/skiff-sdn/skiff/controller/bgp"
	"github.com/skiff-sdn/skiff/controller/etcdserver"
	"github.com/skiff-sdn/skiff/controller/kube"
	"github.com/skiff-sdn/skiff/controller/store"
	"github.com/skiff-sdn/skiff/internal/settings"
	"github.com/skiff-sdn/skiff/internal/tlsconf"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// readBufferSize is the gRPC server's read buffer per connection (see
// Run's server options).
const readBufferSize = 4 << 10

// DefaultPlanInterval is Config.PlanInterval's default: at 100 changes/s
// on a network every agent is on, about one message per agent every 100 ms
// rather than one per change (docs/perf-log/scale.md, runs W5 and W5b: 50 ms left the
// controller's CPU mostly in per-message costs).
const DefaultPlanInterval = 100 * time.Millisecond

// Config configures a controller.
type Config struct {
	// Listen is the gRPC address, such as 127.0.0.1:7400.
	Listen string
	// DataDir holds the embedded etcd's data; unused with EtcdEndpoints.
	DataDir string
	// EtcdEndpoints selects an external etcd cluster instead of the
	// embedded one.
	EtcdEndpoints []string
	// TLS: server certificate and key; with ClientCA, clients must present
	// a certificate signed by it (mTLS). All empty: plaintext.
	TLSCert, TLSKey, TLSClientCA string
	// StatusTTL is how long a node stays connected in the store after its
	// controller vanishes (default 15s).
	StatusTTL time.Duration
	// PlanInterval is the least time between two plan deltas to one agent
	// (default 100ms; negative: none): the changes made meanwhile go in one
	// message. An agent whose plan was quiet that long gets a change at once.
	PlanInterval time.Duration
	// BGP, when set, runs the embedded EVPN speaker.
	BGP *bgp.Config
	// MetricsAddr serves Prometheus metrics at /metrics; empty: none.
	MetricsAddr string
	// Pprof also serves Go's profiles at /debug/pprof/ on MetricsAddr.
	Pprof bool
	// Kube, when set, runs the Kubernetes adapter (controller/kube) as a
	// client of this controller's ManagementService.
	Kube *kube.Config
	// Settings is the installation's settings file (internal/settings):
	// its pod network is made (or checked) before the controller serves.
	Settings string
	// CADir holds the controller's CA (made on first start): it serves
	// with a certificate of it for TLSNames (and the listen host),
	// requires client certificates of it, renews agents' certificates,
	// and with Kube approves agents' certificate requests.
	CADir    string
	TLSNames []string
	// AgentNamespace and AgentServiceAccount are the agents' (the pod's
	// namespace and skiff-agent when empty).
	AgentNamespace, AgentServiceAccount string
}

// Run serves until ctx ends, then stops gracefully.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Listen == "" {
		return errors.New("controller: --listen is required")
	}
	if cfg.Pprof && cfg.MetricsAddr == "" {
		return errors.New("controller: --pprof needs --metrics-addr")
	}
	if cfg.StatusTTL == 0 {
		cfg.StatusTTL = 15 * time.Second
	}
	switch {
	case cfg.PlanInterval == 0:
		cfg.PlanInterval = DefaultPlanInterval
	case cfg.PlanInterval < 0:
		cfg.PlanInterval = 0
	}
	var sets *settings.Settings
	if cfg.Settings != "" {
		s, err := settings.Load(cfg.Settings)
		if err != nil {
			return err
		}
		sets = s
	}
	ca, err := setupCA(&cfg, log)
	if err != nil {
		return err
	}
	var (
		cli  *clientv3.Client
		hist store.HistoryReader
	)
	if len(cfg.EtcdEndpoints) > 0 {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("controller: etcd %v: %w", cfg.EtcdEndpoints, err)
		}
		defer c.Close()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Status(sctx, cfg.EtcdEndpoints[0])
		cancel()
		if err != nil {
			return fmt.Errorf("controller: etcd %v is not reachable: %w", cfg.EtcdEndpoints, err)
		}
		cli = c
		log.Info("using external etcd", "endpoints", cfg.EtcdEndpoints)
	} else {
		if cfg.DataDir == "" {
			return errors.New("controller: --data-dir is required with the embedded etcd")
		}
		srv, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(cfg.DataDir, "etcd")}, log)
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		defer srv.Close()
		cli = srv.Client()
		hist = srv
	}
	st := store.New(cli, log)
	if hist != nil {
		// The embedded etcd's history is read from its backend in one
		// pass (an external etcd's through watches).
		st = st.WithHistoryReader(hist)
	}
	if n, err := st.IndexOwners(ctx); err != nil {
		return fmt.Errorf("controller: %w", err)
	} else if n > 0 {
		log.Info("indexed the owners of endpoints stored before owner records", "endpoints", n)
	}
	pl, err := startPlanner(ctx, st, cfg.PlanInterval, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	var serving readiness
	var speaker *bgp.Speaker
	if cfg.BGP != nil {
		if speaker, err = startBGP(ctx, *cfg.BGP, st, pl, reg, log); err != nil {
			return err
		}
		defer speaker.Close()
	}
	if cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddr, cfg.Pprof, reg, serving.check, log); err != nil {
			return err
		}
	}

	var opts []grpc.ServerOption
	if cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSClientCA != "" {
		tc, err := tlsconf.Server(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	opts = append(opts,
		// An agent that vanished (its host lost) is noticed within 15 s: its
		// node shows not connected (NetworkUnavailable with the Kubernetes
		// adapter).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		// Agents ping every 5 s (agent.KeepaliveTime); allow them some
		// slack before a ping counts as abuse.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 2 * time.Second, PermitWithoutStream: true}),
		// A connection's read buffer lives as long as the connection: with
		// gRPC's 32 KiB default, 5,000 agents held 160 MB of it, for
		// requests that are mostly a few hundred bytes (reports, counters).
		// TLS already buffers a whole record below it; larger messages
		// take more reads, not more memory (docs/perf-log/scale.md, "Read buffer").
		grpc.ReadBufferSize(readBufferSize))
	gs := grpc.NewServer(opts...)
	servers := api.New(st, pl, log, cfg.StatusTTL)
	if err := servers.Register(reg); err != nil {
		return fmt.Errorf("controller: metrics: %w", err)
	}
	skiffv1.RegisterManagementServiceServer(gs, servers.Management)
	if sets != nil {
		if err := ensurePodNetwork(ctx, servers.Management, sets, log); err != nil {
			return err
		}
	}
	if ca != nil {
		servers.SetNodeSigner(ca.SignNodeRequest)
		if cfg.Kube != nil {
			if err := startApprover(ctx, cfg, ca, log); err != nil {
				return err
			}
		}
	}
	if cfg.Kube != nil {
		kctx, stopKube := context.WithCancel(ctx)
		wait, err := startKube(kctx, *cfg.Kube, servers.Management, reg, log)
		if err != nil {
			stopKube()
			return err
		}
		defer wait()
		defer stopKube()
	}
	skiffv1.RegisterAgentServiceServer(gs, servers.Agent)
	skiffv1.RegisterBgpServiceServer(gs, &bgp.Service{Speaker: speaker, Authorize: notAgent})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("controller: listen: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	serving.set()
	log.Info("controller serving", "addr", lis.Addr().String(), "revision", pl.Revision())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("controller: serve: %w", err)
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	return nil
}

// readiness says whether the controller serves its API yet.
type readiness struct{ on atomic.Bool }

func (r *readiness) set() { r.on.Store(true) }

func (r *readiness) check() error {
	if !r.on.Load() {
		return errors.New("not serving yet (store, planner or settings still loading)")
	}
	return nil
}
