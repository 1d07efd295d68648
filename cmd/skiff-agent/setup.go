package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/agent"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/dpu"
	"github.com/skiff-sdn/skiff/datapath/dpuhost"
	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/datapath/software"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// setup discovers the node's capabilities, chooses the mode and opens its
// datapath: the one place that knows which datapaths exist.
func setup(ctx context.Context, cfg agent.Config, log *slog.Logger) (agent.Deps, error) {
	disc := eswitch.New(eswitch.Options{SysRoot: cfg.SysRoot, Logger: log})
	discover := func(ctx context.Context) *skiffv1.NodeCapabilities { return agent.DiscoverCapabilities(ctx, disc, log) }
	caps := discover(ctx)
	mode, err := agent.ChooseMode(cfg.Mode, caps)
	if err != nil {
		return agent.Deps{}, fmt.Errorf("agent: %w", err)
	}
	log.Info("node capabilities", "role", caps.GetRole(), "pfs", len(caps.GetPfs()), "modes", strings.Join(caps.GetModes(), ","), "kernel", caps.GetKernel())
	log.Info("datapath", "mode", mode)
	if mode == agent.ModeDPU || mode == agent.ModeDPUHost {
		return setupDPU(cfg, mode, caps, disc, discover, log)
	}
	learn, err := learnOptions(cfg)
	if err != nil {
		return agent.Deps{}, fmt.Errorf("agent: %w", err)
	}
	dp, err := openDatapath(mode, disc, cfg.SysRoot, learn, log)
	if err != nil {
		return agent.Deps{}, fmt.Errorf("agent: %w", err)
	}
	return agent.Deps{Datapath: dp, Mode: mode, Discover: discover, VFByPCI: agent.VFByPCIFrom(disc), Logger: log}, nil
}

// setupDPU opens the datapath of mode dpu (the offload datapath, or the
// software one without a switchdev eswitch, wrapped to adopt the host's
// VF representors) or dpu-host (VFs into
// pods); VFs and representors come from sysfs, or from --vf-table.
func setupDPU(cfg agent.Config, mode string, caps *skiffv1.NodeCapabilities, disc *eswitch.Discoverer, discover func(context.Context) *skiffv1.NodeCapabilities, log *slog.Logger) (agent.Deps, error) {
	var table *vftable.Table
	if cfg.VFTable != "" {
		t, err := vftable.Load(cfg.VFTable)
		if err != nil {
			return agent.Deps{}, fmt.Errorf("agent: --vf-table: %w", err)
		}
		table = t
	}
	deps := agent.Deps{Mode: mode, Discover: discover, Logger: log}
	if mode == agent.ModeDPUHost {
		var vfs dpuhost.VFs = dpuhost.SysfsVFs{Discoverer: disc}
		if table != nil {
			vfs = table
		}
		dp, err := dpuhost.New(dpuhost.Options{VFs: vfs, StateFile: filepath.Join(cfg.StateDir, "dpuhost-vfs.json"), Logger: log})
		if err != nil {
			return agent.Deps{}, fmt.Errorf("agent: %w", err)
		}
		deps.Datapath = dp
		deps.VFByPCI = func(ctx context.Context, pci string) (agent.LocalVF, error) {
			pf, idx, err := vfs.ByPCI(ctx, pci)
			return agent.LocalVF{PF: pf, PFDevice: pf, Index: idx}, err
		}
		return deps, nil
	}
	var reps dpu.Representors = dpu.EswitchRepresentors{Discoverer: disc}
	var wires dpu.Wires
	if table != nil {
		reps, wires = table, table
	}
	// The host's endpoints are forwarded by tc-flower rules on their
	// representors where this DPU's eswitch is in switchdev mode, by a
	// bridge otherwise (a bench without one).
	var inner datapath.Datapath
	var err error
	if slices.Contains(caps.GetModes(), agent.ModeOffload) {
		log.Info("dpu: switchdev eswitch found: the host's endpoints get flower rules on their representors")
		var learn *offload.LearnOptions
		if learn, err = learnOptions(cfg); err != nil {
			return agent.Deps{}, fmt.Errorf("agent: %w", err)
		}
		inner, err = offload.New(offload.Options{Logger: log, Eswitch: disc, SysRoot: cfg.SysRoot, TunnelHardware: true, Learn: learn,
			Representor: func(e plan.Endpoint) (offload.Port, bool) {
				rep, wire := dpu.Port(wires, e)
				return offload.Port{Rep: rep, Target: wire}, true
			}})
	} else {
		log.Info("dpu: no switchdev eswitch: the host's endpoints are bridged in software")
		inner, err = openDatapath(agent.ModeSoftware, disc, cfg.SysRoot, nil, log)
	}
	if err != nil {
		return agent.Deps{}, fmt.Errorf("agent: %w", err)
	}
	k, err := nl.Open("")
	if err != nil {
		inner.Close()
		return agent.Deps{}, fmt.Errorf("agent: %w", err)
	}
	deps.Datapath = dpu.New(dpu.Options{Node: cfg.Node, Inner: inner, Kernel: k, Representors: reps, Logger: log})
	return deps, nil
}

// learnOptions is the offload datapath's encap learning as cfg.Encap
// asks: nil for "all".
func learnOptions(cfg agent.Config) (*offload.LearnOptions, error) {
	switch cfg.Encap {
	case "", "learned":
		return &offload.LearnOptions{State: filepath.Join(cfg.StateDir, "offload-sends.json")}, nil
	case "all":
		return nil, nil
	}
	return nil, fmt.Errorf("offload-encap: %q is neither learned nor all", cfg.Encap)
}

func openDatapath(mode string, disc *eswitch.Discoverer, sysRoot string, learn *offload.LearnOptions, log *slog.Logger) (datapath.Datapath, error) {
	switch mode {
	case agent.ModeOffload:
		return offload.New(offload.Options{Logger: log, Eswitch: disc, SysRoot: sysRoot, TunnelHardware: true, Learn: learn})
	case agent.ModeSoftware:
		k, err := nl.Open("")
		if err != nil {
			return nil, err
		}
		return software.New(software.Options{Kernel: k, Logger: log}), nil
	}
	return nil, fmt.Errorf("mode %s has no datapath", mode)
}
