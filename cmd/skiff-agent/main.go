// Command skiff-agent runs on every worker: it follows its node's plan from
// the controller and makes the datapath match it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/skiff-sdn/skiff/agent"
	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/logging"
	"github.com/skiff-sdn/skiff/offload/eswitch"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-agent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		cfg        agent.Config
		logLevel   string
		settingsF  string
		installCNI bool
	)
	cmd := &cobra.Command{
		Use:           "skiff-agent",
		Short:         "Skiff node agent",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			log = log.With("node", cfg.Node)
			if err := applySettings(cmd.Flags(), &cfg, settingsF, installCNI); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			deps, err := setup(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer deps.Datapath.Close()
			return agent.Run(ctx, cfg, deps)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Controller, "controller", "127.0.0.1:7400", "controller address host:port; several, comma-separated, are replicas tried in order; or a URI such as dns:///name:port")
	f.StringVar(&cfg.Node, "node", "", "this node's name")
	f.StringVar(&cfg.UnderlayIP, "underlay-ip", "", "this node's underlay (VTEP) address")
	f.StringVar(&cfg.HostIP, "host-ip", "", "this node's address of the other IP family than --underlay-ip (dual-stack nodes): its own traffic reaches pods over that family too")
	f.StringVar(&cfg.Socket, "socket", localapi.DefaultSocket, "local API socket (root only); empty: off")
	f.StringVar(&cfg.LocalAPI, "local-api-listen", "", "also serve the local API on this TCP address, with mTLS (a host's CNI reaching its DPU's agent)")
	f.StringVar(&cfg.LocalAPITLS.Cert, "local-api-tls-cert", "", "certificate of the TCP local API")
	f.StringVar(&cfg.LocalAPITLS.Key, "local-api-tls-key", "", "key of the TCP local API")
	f.StringVar(&cfg.LocalAPITLS.ClientCA, "local-api-client-ca", "", "CA that signs the TCP local API's client certificates")
	f.StringArrayVar(&cfg.LocalAPITLS.Allow, "local-api-allow", nil, "client certificate common name the TCP local API serves (repeatable), e.g. node:host1")
	f.StringVar(&cfg.SysRoot, "sys-root", "/sys", "where sysfs is mounted (NICs, VFs and representors are discovered, and VFs bound to vfio-pci, through it)")
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/skiff-agent", "where the last plan is kept")
	f.StringVar(&cfg.Mode, "mode", "auto", "datapath: auto (offload when a switchdev eswitch exists, else software), software, offload, dpu (on a DPU: its host's VF representors) or dpu-host (a DPU's host: VFs into pods; needs --dpu)")
	f.StringVar(&cfg.Encap, "offload-encap", "learned", "modes offload and dpu: learned (a representor gets an encap rule for each remote endpoint its endpoint sends to, learnt from its first frames, which the node's bridge forwards) or all (one for every remote endpoint of its network from the start)")
	f.StringVar(&cfg.DPU, "dpu", "", "mode dpu-host: the node name of this host's DPU (its agent runs --mode dpu)")
	f.StringVar(&cfg.VFTable, "vf-table", "", "modes dpu and dpu-host on a bench without SR-IOV: a JSON file naming, per VF (pf, index), its netdev (dpu-host) or its representor (dpu; on a test rig also the wire standing in for the VF) instead of sysfs discovery (datapath/vftable)")
	f.DurationVar(&cfg.StatsInterval, "stats-interval", 10*time.Second, "how often counters are sent to the controller")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "address of /metrics and the probes /livez, /readyz and /healthz (empty: off)")
	f.StringVar(&cfg.TLSCA, "tls-ca", "", "CA of the controller's certificate")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "this node's client certificate (CN node:NAME)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "this node's client key")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&settingsF, "settings", "", "the installation's settings file: the controller's address and the mode when not given as flags, the pod network and CNI directories for --install-cni")
	f.BoolVar(&installCNI, "install-cni", false, "install skiff-cni and its configuration (network and directories from --settings) once the controller is connected and the network exists")
	f.StringVar(&cfg.TLSServerName, "tls-server-name", "", "name expected in the controller's certificate (default: the host dialled)")
	cmd.AddCommand(capabilitiesCommand())
	return cmd
}

// capabilitiesCommand prints what the agent would register as this node's
// capabilities, without contacting a controller.
func capabilitiesCommand() *cobra.Command {
	var out, sysRoot, logLevel string
	cmd := &cobra.Command{
		Use:   "capabilities",
		Short: "Discover this node's PFs, VFs, eswitch modes and representors and print them (no controller needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "json" {
				return fmt.Errorf("--output %q: want json", out)
			}
			log, err := logging.New(cmd.ErrOrStderr(), logLevel)
			if err != nil {
				return err
			}
			d := eswitch.New(eswitch.Options{SysRoot: sysRoot, Logger: log})
			caps := agent.DiscoverCapabilities(cmd.Context(), d, log)
			b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitDefaultValues: true}.Marshal(caps)
			if err != nil {
				return fmt.Errorf("capabilities: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "json", "output format: json")
	cmd.Flags().StringVar(&sysRoot, "sys-root", "/sys", "where sysfs is mounted")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	return cmd
}
