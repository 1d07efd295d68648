package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/skiff-sdn/skiff/agent"
	"github.com/skiff-sdn/skiff/internal/settings"
)

// applySettings fills what the settings file gives and the command line
// did not: the controller (the settings', else the Kubernetes Service
// skiff-controller of the pod's namespace), the mode, and what
// --install-cni installs. A bad file stops the agent before it does
// anything, with the field named.
func applySettings(f *pflag.FlagSet, cfg *agent.Config, file string, installCNI bool) error {
	if file == "" {
		if installCNI {
			return fmt.Errorf("--install-cni needs --settings (the pod network and the CNI directories)")
		}
		return nil
	}
	s, err := settings.Load(file)
	if err != nil {
		return err
	}
	if !f.Changed("controller") {
		switch {
		case s.Controller != "":
			cfg.Controller = s.Controller
		case os.Getenv("SKIFF_CONTROLLER_SERVICE_HOST") != "":
			// The Service's address, which Kubernetes gives every pod
			// of its namespace (kube-proxy carries it to the
			// controller, on whichever node it runs).
			cfg.Controller = net.JoinHostPort(os.Getenv("SKIFF_CONTROLLER_SERVICE_HOST"), envOr("SKIFF_CONTROLLER_SERVICE_PORT", "7400"))
		}
	}
	if !f.Changed("mode") {
		cfg.Mode = s.Mode
	}
	if dpu, ok := s.DPUs[cfg.Node]; ok && !f.Changed("dpu") {
		cfg.DPU = dpu
		if !f.Changed("mode") {
			cfg.Mode = agent.ModeDPUHost
		}
	}
	if installCNI {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.CNI = &agent.CNIInstall{Network: s.PodNetwork.Name, BinDir: s.CNI.BinDirFor(cfg.Node), ConfDir: s.CNI.ConfDirFor(cfg.Node),
			File: s.CNI.File, Binary: filepath.Join(filepath.Dir(exe), "skiff-cni")}
		if cfg.Socket == "" {
			return fmt.Errorf("--install-cni needs --socket: the plugin reaches the agent there")
		}
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
