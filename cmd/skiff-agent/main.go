// Command skiff-agent runs on every worker: it follows its node's plan from
// the controller and makes the datapath match it.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiff-sdn/skiff/agent"
	"github.com/skiff-sdn/skiff/agent/localapi"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-agent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		cfg      agent.Config
		logLevel string
	)
	cmd := &cobra.Command{
		Use:           "skiff-agent",
		Short:         "Skiff node agent",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("node", cfg.Node)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return agent.Run(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Controller, "controller", "127.0.0.1:7400", "controller address host:port")
	f.StringVar(&cfg.Node, "node", "", "this node's name")
	f.StringVar(&cfg.UnderlayIP, "underlay-ip", "", "this node's underlay (VTEP) address")
	f.StringVar(&cfg.Socket, "socket", localapi.DefaultSocket, "local API socket (root only); empty: off")
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/skiff-agent", "where the last plan is kept")
	f.StringVar(&cfg.Mode, "mode", "auto", "datapath: auto or software")
	f.DurationVar(&cfg.StatsInterval, "stats-interval", 10*time.Second, "how often counters are sent to the controller")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "address of /metrics and /healthz (empty: off)")
	f.StringVar(&cfg.TLSCA, "tls-ca", "", "CA of the controller's certificate")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "this node's client certificate (CN node:NAME)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "this node's client key")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
