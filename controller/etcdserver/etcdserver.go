// Package etcdserver runs the etcd that skiff-controller embeds by default:
// one member, its data in a directory, listening on loopback only.
//
//	srv, err := etcdserver.Start(ctx, etcdserver.Config{Dir: "/var/lib/skiff/etcd"}, log)
//	defer srv.Close()
//	cli := srv.Client()
//
// History (history.go) reads the member's history from its backend in one
// pass; store.WithHistoryReader takes it.
package etcdserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config says where the embedded etcd keeps its data.
type Config struct {
	// Dir holds the member's data; created when missing.
	Dir string
	// ClientURL is where the member listens for clients; default
	// http://127.0.0.1:0 (a free port).
	ClientURL string
	// CompactionRetention is how much history is kept (default 1h), which
	// bounds how far back a reconnecting agent can be sent a delta.
	CompactionRetention time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	e   *embed.Etcd
	cli *clientv3.Client
}

// Start starts the member and waits until it serves.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("etcdserver: data dir is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdserver: %w", err)
	}
	if cfg.ClientURL == "" {
		cfg.ClientURL = "http://127.0.0.1:0"
	}
	if cfg.CompactionRetention == 0 {
		cfg.CompactionRetention = time.Hour
	}
	cu, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: client url: %w", err)
	}
	// The peer listener is never dialled (one member) but must exist; a
	// unix socket in the data dir keeps it off the network.
	pu, _ := url.Parse("unix://" + filepath.Join(cfg.Dir, "peer.sock"))
	ec := embed.NewConfig()
	ec.Name = "skiff"
	ec.Dir = filepath.Join(cfg.Dir, "data")
	ec.ListenClientUrls = []url.URL{*cu}
	ec.AdvertiseClientUrls = []url.URL{*cu}
	ec.ListenPeerUrls = []url.URL{*pu}
	ec.AdvertisePeerUrls = []url.URL{*pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.CompactionRetention.String()
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	_ = os.Remove(filepath.Join(cfg.Dir, "peer.sock"))
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcdserver: not ready after 60s")
	}
	addr := e.Clients[0].Addr().String()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("etcdserver: client: %w", err)
	}
	log.Info("embedded etcd ready", "dir", cfg.Dir, "addr", addr)
	return &Server{e: e, cli: cli}, nil
}

// Client returns a client of the member.
func (s *Server) Client() *clientv3.Client { return s.cli }

// Endpoint returns the member's client address (host:port).
func (s *Server) Endpoint() string { return s.e.Clients[0].Addr().String() }

// Close stops the member.
func (s *Server) Close() {
	s.cli.Close()
	s.e.Close()
}
