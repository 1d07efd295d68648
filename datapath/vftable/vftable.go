// Package vftable is the explicit stand-in for SR-IOV discovery on test
// benches without a NIC: a file that says, per VF (a PF as endpoints name
// it, and a VF index), which netdev is the VF on a dpu-host node, or its
// representor on a dpu node, and the VF's PCI address (what a CNI's
// deviceID names). skiff-agent reads it with --vf-table FILE; without the
// flag, the agent discovers VFs and representors in sysfs
// (offload/eswitch). The e2e suite stands a host's VFs in with veth
// pairs: one end in the host (the "VF"), the other in its DPU (the
// "representor").
//
//	{"vfs": [{"pf": "0000:03:00.0", "index": 0, "pci": "0000:03:00.2", "netdev": "vf0"}]}
package vftable

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// Entry is one VF.
type Entry struct {
	PF     string `json:"pf"`
	Index  int    `json:"index"`
	PCI    string `json:"pci,omitempty"`
	Netdev string `json:"netdev"`
	// Wire, on a dpu whose representors carry no frames (netdevsim in
	// the kernel VM), is the netdev standing in for the VF's side of the
	// eswitch: the offload datapath moves its frames into the
	// representor and sends the endpoint's frames to it. Empty on real
	// hardware.
	Wire string `json:"wire,omitempty"`
}

// Table is a list of VFs. Safe for concurrent use (read-only).
type Table struct {
	VFs []Entry `json:"vfs"`
}

// Load reads a table; every entry needs a pf, an index of 0 or more and
// a netdev, and no VF (pf, index) or PCI address may appear twice.
func Load(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vf table: %w", err)
	}
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("vf table %s: %w", path, err)
	}
	seen, pcis := map[string]bool{}, map[string]bool{}
	for i, e := range t.VFs {
		key := fmt.Sprintf("%s/%d", e.PF, e.Index)
		switch {
		case e.PF == "" || e.Netdev == "":
			return nil, fmt.Errorf("vf table %s: vfs[%d]: pf and netdev are required", path, i)
		case e.Index < 0:
			return nil, fmt.Errorf("vf table %s: vfs[%d]: index: %d is negative", path, i, e.Index)
		case seen[key]:
			return nil, fmt.Errorf("vf table %s: vfs[%d]: VF %d of %s is listed twice", path, i, e.Index, e.PF)
		case e.Wire != "" && e.Wire == e.Netdev:
			return nil, fmt.Errorf("vf table %s: vfs[%d]: wire: %s is the VF's netdev too", path, i, e.Wire)
		case e.PCI != "" && pcis[e.PCI]:
			return nil, fmt.Errorf("vf table %s: vfs[%d]: pci: %s is listed twice", path, i, e.PCI)
		}
		seen[key], pcis[e.PCI] = true, e.PCI != ""
	}
	return &t, nil
}

// ByPCI finds a VF by PCI address.
func (t *Table) ByPCI(_ context.Context, pci string) (pf string, index int, err error) {
	for _, e := range t.VFs {
		if e.PCI != "" && e.PCI == pci {
			return e.PF, e.Index, nil
		}
	}
	return "", 0, fmt.Errorf("vf table: no VF with PCI address %s", pci)
}

// Wire names the netdev standing in for the wire side of VF index of
// pf ("" when the table names none).
func (t *Table) Wire(pf string, index int) string {
	for _, e := range t.VFs {
		if e.PF == pf && e.Index == index {
			return e.Wire
		}
	}
	return ""
}

// Netdev names the netdev of VF index of pf.
func (t *Table) Netdev(_ context.Context, pf string, index int) (string, error) {
	for _, e := range t.VFs {
		if e.PF == pf && e.Index == index {
			return e.Netdev, nil
		}
	}
	return "", fmt.Errorf("vf table: no VF %d of PF %s", index, pf)
}
