package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/skiff-sdn/skiff/controller/agentcert"
	"github.com/skiff-sdn/skiff/controller/kube"
	"github.com/skiff-sdn/skiff/internal/logging"
	"github.com/skiff-sdn/skiff/internal/settings"
)

// agentCertificateCommand is the agent pod's init step on Kubernetes: get
// the node's certificate through a CertificateSigningRequest (agentcert).
func agentCertificateCommand() *cobra.Command {
	var (
		o          agentcert.RequestOptions
		kubeconfig string
		logLevel   string
		settingsF  string
	)
	cmd := &cobra.Command{
		Use:   "agent-certificate --node NAME --dir DIR",
		Short: "Get this node's agent certificate from the controller through a Kubernetes CertificateSigningRequest (an agent pod's init step)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			if o.Node == "" || o.Dir == "" {
				return fmt.Errorf("--node and --dir are required")
			}
			// The settings first: refused settings stop the agent's pod
			// here, saying why, before it asks for anything.
			if settingsF != "" {
				if _, err := settings.Load(settingsF); err != nil {
					return err
				}
			}
			rc, err := kube.RESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			o.Logger = log
			return agentcert.Request(cmd.Context(), cs, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Node, "node", "", "this node's name")
	f.StringVar(&o.Dir, "dir", "", "where node.pem and node-key.pem go")
	f.DurationVar(&o.Renew, "renew", 7*24*time.Hour, "ask again when the certificate held has less than this left")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long to wait for the controller to sign")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: the pod's in-cluster configuration)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&settingsF, "settings", "", "check the installation's settings file first (the agent's)")
	return cmd
}
