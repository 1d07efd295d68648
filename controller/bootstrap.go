package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"

	"github.com/skiff-sdn/skiff/controller/agentcert"
	"github.com/skiff-sdn/skiff/controller/kube"
	"github.com/skiff-sdn/skiff/internal/settings"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// What an installation (deploy/kubernetes, deploy/systemd) adds to the
// controller: the settings file's pod network, the CA it serves with and
// signs agents' certificates with, and on Kubernetes the approval of the
// agents' certificate requests.

// setupCA loads (or makes) the CA in cfg.CADir, writes the serving
// certificate for cfg.TLSNames and the listen address, and points the TLS
// settings at them: mTLS with clients signed by that CA.
func setupCA(cfg *Config, log *slog.Logger) (*agentcert.CA, error) {
	if cfg.CADir == "" {
		return nil, nil
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSClientCA != "" {
		return nil, errors.New("controller: --ca-dir and --tls-cert/--tls-key/--tls-client-ca: give one")
	}
	ca, err := agentcert.LoadOrCreateCA(cfg.CADir)
	if err != nil {
		return nil, fmt.Errorf("controller: --ca-dir: %w", err)
	}
	names := append([]string(nil), cfg.TLSNames...)
	if host, _, err := net.SplitHostPort(cfg.Listen); err == nil && host != "" && host != "0.0.0.0" && host != "::" {
		names = append(names, host)
	}
	if len(names) == 0 {
		return nil, errors.New("controller: --ca-dir needs --tls-names or a --listen host: the names agents dial")
	}
	if err := ca.WriteServerCert(cfg.CADir, names); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	cfg.TLSCert = filepath.Join(cfg.CADir, agentcert.ServerCert)
	cfg.TLSKey = filepath.Join(cfg.CADir, agentcert.ServerKey)
	cfg.TLSClientCA = filepath.Join(cfg.CADir, agentcert.CACert)
	log.Info("serving with the controller's CA", "dir", cfg.CADir, "names", strings.Join(names, ","))
	return ca, nil
}

// ensurePodNetwork makes the settings' pod network and its subnets exist
// (podNetwork.create) or checks that they do; a network that exists with
// other values is an error naming the field, never changed. A network
// that must not be created and does not exist is logged, not fatal.
func ensurePodNetwork(ctx context.Context, mgmt skiffv1.ManagementServiceServer, s *settings.Settings, log *slog.Logger) error {
	pn := s.PodNetwork
	n, err := mgmt.GetNetwork(ctx, &skiffv1.GetRequest{Name: pn.Name})
	switch {
	case status.Code(err) == codes.NotFound && !pn.Create:
		// Someone may create it later (skiffctl); until then agents
		// install no CNI and say why.
		log.Error("the settings' pod network does not exist and podNetwork.create is false: no node can serve pods until it is created",
			"field", "podNetwork.name", "network", pn.Name)
		return nil
	case status.Code(err) == codes.NotFound:
		if n, err = mgmt.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: pn.Name, Vni: pn.VNI, Mtu: pn.MTU, Egress: pn.Egress}}); err != nil {
			return fmt.Errorf("settings: podNetwork: %w", err)
		}
		log.Info("pod network created", "network", pn.Name, "vni", pn.VNI)
	case err != nil:
		return fmt.Errorf("settings: podNetwork: %w", err)
	case n.GetVni() != pn.VNI:
		return fmt.Errorf("settings: podNetwork.vni: network %q exists with VNI %d, the settings say %d", pn.Name, n.GetVni(), pn.VNI)
	case n.GetEgress() != pn.Egress && !(n.GetEgress() == "" && pn.Egress == "none"):
		return fmt.Errorf("settings: podNetwork.egress: network %q exists with egress %q, the settings say %q", pn.Name, n.GetEgress(), pn.Egress)
	}
	subs, err := mgmt.ListSubnets(ctx, &skiffv1.ListRequest{Network: pn.Name})
	if err != nil {
		return fmt.Errorf("settings: podNetwork.subnets: %w", err)
	}
	have := map[string]*skiffv1.Subnet{}
	for _, sn := range subs.GetSubnets() {
		have[sn.GetName()] = sn
	}
	for i, sn := range pn.Subnets {
		field := fmt.Sprintf("settings: podNetwork.subnets[%d]", i)
		if got, ok := have[sn.Name]; ok {
			if got.GetNetwork() != pn.Name || got.GetCidr() != sn.CIDR {
				return fmt.Errorf("%s: subnet %q exists with %s on network %q", field, sn.Name, got.GetCidr(), got.GetNetwork())
			}
			continue
		}
		if !pn.Create {
			return fmt.Errorf("%s: subnet %q does not exist (and podNetwork.create is false)", field, sn.Name)
		}
		if _, err := mgmt.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: sn.Name, Network: pn.Name, Cidr: sn.CIDR}}); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		log.Info("pod network subnet created", "subnet", sn.Name, "cidr", sn.CIDR)
	}
	return nil
}

// startApprover approves and signs the agents' certificate requests and
// publishes the CA for them, until ctx ends.
func startApprover(ctx context.Context, cfg Config, ca *agentcert.CA, log *slog.Logger) error {
	rc, err := kube.RESTConfig(cfg.Kube.Kubeconfig)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	ns := cfg.AgentNamespace
	if ns == "" {
		ns = podNamespace()
	}
	if err := agentcert.PublishCA(ctx, cs, ns, ca); err != nil {
		return fmt.Errorf("controller: publishing the CA in ConfigMap %s/skiff-ca: %w", ns, err)
	}
	sa := cfg.AgentServiceAccount
	if sa == "" {
		sa = "skiff-agent"
	}
	a := &agentcert.Approver{Client: cs, CA: ca, Namespace: ns, ServiceAccount: sa, Logger: log}
	go func() {
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("agent certificate approver stopped", "err", err)
		}
	}()
	log.Info("approving agent certificates", "namespace", ns, "serviceAccount", sa)
	return nil
}

// podNamespace is the namespace of the pod this process runs in
// (skiff-system when it cannot tell).
func podNamespace() string {
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return "skiff-system"
}
