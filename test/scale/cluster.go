package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/skiff-sdn/skiff/internal/dialer"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ClusterConfig shapes the controller side of a run.
type ClusterConfig struct {
	// Replicas: 1 runs one controller with its embedded etcd; more run
	// that many controllers on a three-member etcd cluster.
	Replicas int
	// TLS runs everything with mTLS (node certificates for agents).
	TLS bool
	// Args are added to every controller's command line.
	Args []string
}

// Cluster is the controllers (and etcd members) of a run.
type Cluster struct {
	Bins        Binaries
	Dir         string
	CA          *CA // nil without TLS
	Controllers []*Controller
	Members     []*Member
	tlsArgs     []string
}

// Controller is one skiff-controller process.
type Controller struct {
	Addr, Metrics string
	args          []string
	bin, log      string
	creds         credentials.TransportCredentials
	Proc          *Proc
	// Started is when the last Start began.
	Started time.Time
}

// Member is one etcd member process.
type Member struct {
	Name, Client, Peer, Dir string
	args                    []string
	bin                     string
	Proc                    *Proc
}

// NewCluster prepares (does not start) the processes of cfg under dir.
func NewCluster(bins Binaries, dir string, cfg ClusterConfig) (*Cluster, error) {
	c := &Cluster{Bins: bins, Dir: dir}
	if cfg.TLS {
		ca, err := NewCA()
		if err != nil {
			return nil, err
		}
		caf, cert, key, err := ca.Files(dir, "controller")
		if err != nil {
			return nil, err
		}
		c.CA, c.tlsArgs = ca, []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caf}
	}
	var etcdArgs []string
	if cfg.Replicas > 1 {
		var cluster, clients []string
		for i := 1; i <= 3; i++ {
			client, err := freeAddr("127.0.0.1")
			if err != nil {
				return nil, err
			}
			peer, err := freeAddr("127.0.0.1")
			if err != nil {
				return nil, err
			}
			m := &Member{Name: fmt.Sprintf("m%d", i), Client: client, Peer: peer, Dir: filepath.Join(dir, fmt.Sprintf("etcd%d", i)), bin: bins.Etcd}
			c.Members = append(c.Members, m)
			cluster = append(cluster, m.Name+"=http://"+peer)
			clients = append(clients, "http://"+client)
		}
		for _, m := range c.Members {
			m.args = []string{"--name", m.Name, "--dir", m.Dir, "--client", m.Client, "--peer", m.Peer, "--cluster", strings.Join(cluster, ",")}
		}
		etcdArgs = []string{"--etcd-endpoints", strings.Join(clients, ",")}
	}
	creds, err := c.OperatorCreds()
	if err != nil {
		return nil, err
	}
	for i := 1; i <= max(cfg.Replicas, 1); i++ {
		addr, err := freeAddr(fmt.Sprintf("127.0.0.%d", i))
		if err != nil {
			return nil, err
		}
		metrics, err := freeAddr("127.0.0.1")
		if err != nil {
			return nil, err
		}
		args := []string{"--listen", addr, "--metrics-addr", metrics, "--pprof"}
		if cfg.Replicas > 1 {
			args = append(args, etcdArgs...)
		} else {
			args = append(args, "--data-dir", filepath.Join(dir, "controller"))
		}
		args = append(append(args, c.tlsArgs...), cfg.Args...)
		c.Controllers = append(c.Controllers, &Controller{Addr: addr, Metrics: metrics, args: args, bin: bins.Controller,
			log: filepath.Join(dir, fmt.Sprintf("controller%d.log", i)), creds: creds})
	}
	return c, nil
}

// OperatorCreds returns the credentials of an operator (management API).
func (c *Cluster) OperatorCreds() (credentials.TransportCredentials, error) {
	if c.CA == nil {
		return insecure.NewCredentials(), nil
	}
	return c.CA.Client("operator")
}

// NodeCreds returns the credentials of node's agent.
func (c *Cluster) NodeCreds(node string) (credentials.TransportCredentials, error) {
	if c.CA == nil {
		return insecure.NewCredentials(), nil
	}
	return c.CA.Client("node:" + node)
}

// Target is the --controller value naming every replica.
func (c *Cluster) Target() string {
	var addrs []string
	for _, ct := range c.Controllers {
		addrs = append(addrs, ct.Addr)
	}
	return strings.Join(addrs, ",")
}

// Start starts the etcd members (all at once: a member is ready when the
// cluster has a leader), then the controllers, and waits until each
// serves.
func (c *Cluster) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Members)+len(c.Controllers))
	for i, m := range c.Members {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Start(ctx) }()
	}
	wg.Wait()
	for i, ct := range c.Controllers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[len(c.Members)+i] = ct.Start(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close kills every process.
func (c *Cluster) Close() {
	for _, ct := range c.Controllers {
		ct.Proc.Kill()
	}
	for _, m := range c.Members {
		m.Proc.Kill()
	}
}

// Mgmt returns a management client of every replica (failing over
// between them) and its connection.
func (c *Cluster) Mgmt() (skiffv1.ManagementServiceClient, *grpc.ClientConn, error) {
	creds, err := c.OperatorCreds()
	if err != nil {
		return nil, nil, err
	}
	conn, err := dialer.Dial(c.Target(), grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, err
	}
	return skiffv1.NewManagementServiceClient(conn), conn, nil
}

// Start starts the controller and waits until its health service says
// SERVING (it listens once its planner is loaded).
func (ct *Controller) Start(ctx context.Context) error {
	ct.Started = time.Now()
	p, err := Start("controller "+ct.Addr, ct.log, nil, ct.bin, ct.args...)
	if err != nil {
		return err
	}
	ct.Proc = p
	// gRPC's default reconnection backoff (1 s, growing) would round
	// the start -> serving figure up to the next retry: poll every 50 ms.
	conn, err := grpc.NewClient(ct.Addr, grpc.WithTransportCredentials(ct.creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	return p.waitUntil(ctx, "controller "+ct.Addr+" serving", 50*time.Millisecond, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
}

// waitUntil polls ready every interval until it holds, the process exits
// or ctx ends.
func (p *Proc) waitUntil(ctx context.Context, what string, every time.Duration, ready func() bool) error {
	for !ready() {
		if p.Exited() {
			return fmt.Errorf("%s: exited: %s", what, p.Tail(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(every):
		}
	}
	return nil
}

// Usage reads the controller's memory and CPU time.
func (ct *Controller) Usage() (Usage, error) { return ReadUsage(ct.Proc.Pid()) }

// Start starts the member and waits until it says it is ready.
func (m *Member) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	log := filepath.Join(m.Dir, "member.log")
	before, _ := os.ReadFile(log)
	p, err := Start("etcd "+m.Name, log, nil, m.bin, m.args...)
	if err != nil {
		return err
	}
	m.Proc = p
	return p.waitUntil(ctx, "etcd "+m.Name+" ready", 50*time.Millisecond, func() bool {
		b, _ := os.ReadFile(log)
		return len(b) > len(before) && strings.Contains(string(b[len(before):]), "ready")
	})
}
