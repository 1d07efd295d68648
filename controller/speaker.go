package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/api"
	"github.com/skiff-sdn/skiff/controller/bgp"
	"github.com/skiff-sdn/skiff/controller/planner"
	"github.com/skiff-sdn/skiff/controller/store"
)

// startBGP starts the EVPN speaker: it advertises what the store calls
// for and hands the routes learned from peers to the planner.
func startBGP(ctx context.Context, cfg bgp.Config, st *store.Store, pl plans, reg prometheus.Registerer, log *slog.Logger) (*bgp.Speaker, error) {
	log = log.With("component", "bgp")
	// The learned set takes effect at the next store revision, which this
	// controller makes by writing a marker key the planner does not read:
	// plan deltas then carry a revision of their own, so an agent that
	// reconnects at the previous one is told.
	marker := store.DefaultPrefix + "bgp/learned/" + cfg.RouterID
	onLearned := func(rs []bgp.Route) {
		pl.StageExternal(externals(rs))
		_, err := st.Client().Put(ctx, marker, fmt.Sprintf("%d routes at %s", len(rs), time.Now().UTC().Format(time.RFC3339Nano)))
		if err != nil {
			ds := pl.SetExternal(externals(rs))
			log.Warn("bgp learned routes applied without a new store revision", "err", err, "plansChanged", len(ds))
			return
		}
		log.Info("bgp learned routes", "routes", len(rs))
	}
	sp, err := bgp.New(ctx, cfg, log, bgp.Options{OnLearned: onLearned, Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	go func() { _ = bgp.Follow(ctx, st, sp, log, time.Second) }()
	return sp, nil
}

// externals converts learned type-2 and type-3 routes to the planner's
// external remote endpoints and flood VTEPs.
func externals(rs []bgp.Route) []planner.External {
	var out []planner.External
	for _, r := range rs {
		switch r.Type {
		case bgp.TypeMACIP:
			e := planner.External{VNI: r.VNI, VTEP: r.NextHop, MAC: r.MAC}
			if r.IP.IsValid() {
				e.IPs = []netip.Prefix{netip.PrefixFrom(r.IP, r.IP.BitLen())}
			}
			out = append(out, e)
		case bgp.TypeMulticast:
			out = append(out, planner.External{VNI: r.VNI, VTEP: r.NextHop})
		}
	}
	return out
}

// notAgent refuses callers that present an agent's certificate (common
// name "node:..."), or none, on a TLS connection; plaintext is trusted.
func notAgent(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	cn := ""
	if chains := ti.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
		cn = chains[0][0].Subject.CommonName
	}
	if cn == "" || strings.HasPrefix(cn, api.NodeCertPrefix) {
		return status.Errorf(codes.PermissionDenied, "certificate %q may not use the BGP API", cn)
	}
	return nil
}

// serveMetrics serves reg on addr at /metrics until ctx ends.
// serveMetrics serves /metrics, and /readyz (ready says whether the
// controller serves its API) and /livez for probes, on addr.
func serveMetrics(ctx context.Context, addr string, profiles bool, reg *prometheus.Registry, ready func() error, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("controller: metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("metrics serving", "addr", lis.Addr().String())
	return nil
}
