// Command skiff-controller is Skiff's controller: the store (etcd, embedded
// by default), IPAM, the planner and the gRPC API for agents and operators.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiff-sdn/skiff/controller"
	"github.com/skiff-sdn/skiff/controller/bgp"
	"github.com/skiff-sdn/skiff/controller/kube"
	"github.com/skiff-sdn/skiff/internal/logging"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-controller:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		cfg       controller.Config
		endpoints string
		logLevel  string
		bgpFlags  bgp.Flags
		kubeCfg   kube.Config
		inCluster bool
	)
	cmd := &cobra.Command{
		Use:           "skiff-controller",
		Short:         "Skiff controller: store, IPAM, planner and API",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			for _, e := range strings.Split(endpoints, ",") {
				if e = strings.TrimSpace(e); e != "" {
					cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, e)
				}
			}
			if cfg.BGP, err = bgpFlags.Config(cmd.Flags()); err != nil {
				return err
			}
			if kubeCfg.Kubeconfig != "" || inCluster {
				if kubeCfg.Kubeconfig != "" && inCluster {
					return fmt.Errorf("--kube and --kubeconfig: give one (--kube uses the pod's in-cluster configuration)")
				}
				cfg.Kube = &kubeCfg
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return controller.Run(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7400", "gRPC listen address")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/skiff", "data directory of the embedded etcd")
	f.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated URLs of an external etcd cluster (instead of the embedded one)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "server certificate (PEM)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "server key (PEM)")
	f.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "CA that signs client certificates; enables mTLS")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics")
	f.BoolVar(&cfg.Pprof, "pprof", false, "also serve Go's CPU and memory profiles at /debug/pprof/ on --metrics-addr")
	f.DurationVar(&cfg.PlanInterval, "plan-interval", controller.DefaultPlanInterval, "least time between two plan messages to one agent: changes made meanwhile go in one message (negative: one message per change)")
	bgpFlags.Add(f)
	f.StringVar(&kubeCfg.Kubeconfig, "kubeconfig", "", "run the Kubernetes adapter with this kubeconfig")
	f.BoolVar(&inCluster, "kube", false, "run the Kubernetes adapter with the pod's in-cluster configuration")
	f.DurationVar(&kubeCfg.GCGrace, "kube-gc-grace", 30*time.Second, "how long the endpoints of a pod that left the API wait for its CNI DEL before they are freed")
	f.BoolVar(&kubeCfg.LeaderElection, "kube-leader-elect", true, "run the adapter only in the replica holding the Lease (off only with one replica)")
	f.StringVar(&kubeCfg.LeaseNamespace, "kube-lease-namespace", "", "namespace of the adapter's Lease (default: the pod's, else kube-system)")
	f.StringVar(&kubeCfg.LeaseName, "kube-lease-name", "skiff-controller", "name of the adapter's Lease")
	f.StringVar(&cfg.Settings, "settings", "", "the installation's settings file (its pod network is made or checked at start)")
	f.StringVar(&cfg.CADir, "ca-dir", "", "keep the controller's CA here (made on first start): serve mTLS with it, renew agents' certificates, and with --kube approve their certificate requests")
	f.StringSliceVar(&cfg.TLSNames, "tls-names", nil, "names and addresses agents dial (the serving certificate's, with --ca-dir)")
	f.StringVar(&cfg.AgentNamespace, "agent-namespace", "", "namespace of the agents' ServiceAccount and of the skiff-ca ConfigMap (default: the pod's)")
	f.StringVar(&cfg.AgentServiceAccount, "agent-service-account", "skiff-agent", "the agents' ServiceAccount, the only one whose certificate requests are approved")
	cmd.AddCommand(agentCertificateCommand())
	cmd.SetContext(context.Background())
	return cmd
}
