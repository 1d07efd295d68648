package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Config configures the adapter.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; empty: the in-cluster
	// configuration (the pod's ServiceAccount).
	Kubeconfig string
	// GCGrace is how long the endpoints of a pod that left the API stay
	// before they are freed (its CNI DEL may still come); default 30s.
	GCGrace time.Duration
	// LeaderElection runs the adapter only in the replica holding the
	// Lease LeaseNamespace/LeaseName (default on; off only when a single
	// replica runs).
	LeaderElection bool
	// LeaseNamespace defaults to the pod's namespace in a cluster, else
	// kube-system; LeaseName to skiff-controller.
	LeaseNamespace, LeaseName string
	// Identity names this replica in the Lease; default host name and a
	// random suffix.
	Identity string
	// Registerer takes the adapter's metrics (nil: none).
	Registerer prometheus.Registerer
}

const (
	defaultGrace     = 30 * time.Second
	defaultLeaseName = "skiff-controller"
	nsFile           = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// RESTConfig loads the kubeconfig at path, or the in-cluster
// configuration when path is empty.
func RESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: in-cluster configuration: %w (outside a pod, give --kubeconfig)", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kube: --kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// Adapter is the Kubernetes orchestrator adapter: it watches the API and
// feeds the controller through its ManagementService only.
type Adapter struct {
	cfg    Config
	client kubernetes.Interface
	mgmt   skiffv1.ManagementServiceClient
	log    *slog.Logger
	m      *metrics
}

// New checks cfg and makes the Kubernetes client; it does not contact the
// API server (informers retry until it answers).
func New(cfg Config, rc *rest.Config, mgmt skiffv1.ManagementServiceClient, log *slog.Logger) (*Adapter, error) {
	if cfg.GCGrace == 0 {
		cfg.GCGrace = defaultGrace
	}
	if cfg.GCGrace < 0 {
		return nil, fmt.Errorf("kube: --kube-gc-grace: must not be negative, got %v", cfg.GCGrace)
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = defaultLeaseName
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = "kube-system"
		if b, err := os.ReadFile(nsFile); err == nil && strings.TrimSpace(string(b)) != "" {
			cfg.LeaseNamespace = strings.TrimSpace(string(b))
		}
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.Identity = host + "_" + hex.EncodeToString(b)
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "skiff-controller"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	return &Adapter{cfg: cfg, client: client, mgmt: mgmt, log: log.With("component", "kube"), m: newMetrics(cfg.Registerer)}, nil
}

// Run runs the adapter until ctx ends: with leader election, only while
// this replica leads (and again whenever it leads again).
func (a *Adapter) Run(ctx context.Context) error {
	if !a.cfg.LeaderElection {
		a.m.leader.Set(1)
		return a.lead(ctx)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.LeaseNamespace, Name: a.cfg.LeaseName},
		Client:     a.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: a.cfg.LeaseName, ReleaseOnCancel: true,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					a.log.Info("leading: the Kubernetes adapter runs here", "lease", a.cfg.LeaseNamespace+"/"+a.cfg.LeaseName, "identity", a.cfg.Identity)
					a.m.leader.Set(1)
					if err := a.lead(lctx); err != nil && lctx.Err() == nil {
						a.log.Error("kubernetes adapter stopped", "err", err)
					}
				},
				OnStoppedLeading: func() { a.m.leader.Set(0) },
				OnNewLeader: func(id string) {
					if id != a.cfg.Identity {
						a.log.Info("the Kubernetes adapter runs in another replica", "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("kube: leader election: %w", err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
		if ctx.Err() == nil {
			a.log.Warn("lost the lease; standing for election again")
		}
	}
	return nil
}

// lead runs the adapter proper (the leader's work) until ctx ends.
func (a *Adapter) lead(ctx context.Context) error {
	ad := newAdapter(a)
	err := ad.run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
