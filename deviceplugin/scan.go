package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// Device is one VF as a pool advertises it. Its ID is the VF's PCI
// address: stable across restarts of the plugin, of the kubelet and of
// the node, and what the CNI and the pod resources API name it by.
type Device struct {
	ID    string // PCI address of the VF (0000:03:00.2)
	Index int    // VF index on its PF
	// PF is the PF's netdev; PFPCI its PCI address (empty for PFs that
	// are not PCI functions).
	PF, PFPCI string
	// NUMA is the VF's NUMA node, -1 when the platform does not say.
	NUMA int
	// Vendor and DeviceID are the PCI IDs (15b3, 101e).
	Vendor, DeviceID string
	Driver           string
	// Netdev is the VF's netdev as this host sees it now; empty when the
	// VF is bound to vfio-pci, or its netdev was moved into a pod.
	Netdev string
	// Representor is the VF's switchdev port, empty without one.
	Representor string
	// IOMMUGroup is the number of the VF's IOMMU group ("" without one).
	IOMMUGroup string
	// Healthy, and when not, why.
	Healthy bool
	Reason  string
}

// Scanner reads the node's VFs through sysfs and devlink and sorts them
// into pools. Safe for concurrent use (it holds no state).
type Scanner struct {
	sys, dev string
	disco    *eswitch.Discoverer
}

// NewScanner returns a Scanner over the sysfs tree at sysRoot ("/sys"
// when empty), the device nodes at devRoot ("/dev" when empty) and
// devlink dl (the kernel's when nil).
func NewScanner(sysRoot, devRoot string, dl eswitch.Devlink) *Scanner {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	if devRoot == "" {
		devRoot = "/dev"
	}
	return &Scanner{sys: sysRoot, dev: devRoot, disco: eswitch.New(eswitch.Options{SysRoot: sysRoot, Devlink: dl})}
}

// Scan returns the devices of each pool (by resource name, sorted by ID)
// as the hardware is now, and the problems met: objects of the tree that
// could not be read (left out), and VFs that more than one pool selects
// (given to the first).
func (s *Scanner) Scan(ctx context.Context, pools []Pool) (map[string][]Device, []error, error) {
	node, err := s.disco.Discover(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("deviceplugin: %w", err)
	}
	problems := slices.Clone(node.Problems)
	out := map[string][]Device{}
	for _, p := range pools {
		out[p.ResourceName] = nil
	}
	owner := map[string]string{} // VF PCI address -> resource
	for i := range node.PFs {
		pf := &node.PFs[i]
		pfDown, pfState := s.linkDown(pf.Netdev)
		for _, vf := range pf.VFs {
			if vf.PCIAddress == "" {
				continue // not a PCI function (netdevsim): nothing to hand out
			}
			dev, err := s.device(pf, vf)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			c := candidate{pf: pf.Netdev, vendor: dev.Vendor, device: dev.DeviceID, driver: dev.Driver, index: vf.Index}
			for _, p := range pools {
				if !p.Selectors.match(c) {
					continue
				}
				if first, taken := owner[dev.ID]; taken {
					problems = append(problems, fmt.Errorf("VF %s (%s vf %d) is selected by %s and %s: it stays in %s", dev.ID, pf.Netdev, vf.Index, first, p.ResourceName, first))
					continue
				}
				owner[dev.ID] = p.ResourceName
				d := dev
				d.Healthy, d.Reason = health(p, pf, d, pfDown, pfState)
				if d.Healthy && p.Use == UseVFIO && !exists(filepath.Join(s.dev, "vfio", d.IOMMUGroup)) {
					d.Healthy, d.Reason = false, "no device node "+filepath.Join(s.dev, "vfio", d.IOMMUGroup)
				}
				out[p.ResourceName] = append(out[p.ResourceName], d)
			}
		}
	}
	for r := range out {
		slices.SortFunc(out[r], func(a, b Device) int { return strings.Compare(a.ID, b.ID) })
	}
	return out, problems, nil
}

// health says whether a VF can be handed out now, and if not why.
func health(p Pool, pf *eswitch.PF, d Device, pfDown bool, pfState string) (bool, string) {
	switch {
	case pfDown:
		return false, fmt.Sprintf("PF %s link is %s", pf.Netdev, pfState)
	case p.RequireSwitchdev && pf.Mode != eswitch.ModeSwitchdev:
		mode := string(pf.Mode)
		if mode == "" {
			mode = "none"
		}
		return false, fmt.Sprintf("PF %s eswitch is %s, the pool needs switchdev", pf.Netdev, mode)
	case p.RequireSwitchdev && d.Representor == "":
		return false, fmt.Sprintf("VF %d of %s has no representor", d.Index, pf.Netdev)
	case p.Use == UseVFIO && d.Driver != "vfio-pci":
		return false, fmt.Sprintf("bound to %q, the pool hands out VFs on vfio-pci", d.Driver)
	case p.Use == UseVFIO && d.IOMMUGroup == "":
		return false, "no IOMMU group"
	case p.Use == UseNetdev && (d.Driver == "" || d.Driver == "vfio-pci"):
		return false, fmt.Sprintf("bound to %q, the pool hands out VFs with a kernel netdev driver", d.Driver)
	}
	return true, ""
}

// linkDown reads the PF netdev's operstate: down, lowerlayerdown and
// notpresent are down; up, unknown (drivers that do not report) and a
// missing attribute are not.
func (s *Scanner) linkDown(netdev string) (bool, string) {
	b, err := os.ReadFile(filepath.Join(s.sys, "class", "net", netdev, "operstate"))
	if err != nil {
		return false, ""
	}
	st := strings.TrimSpace(string(b))
	switch st {
	case "down", "lowerlayerdown", "notpresent":
		return true, st
	}
	return false, st
}

func (s *Scanner) device(pf *eswitch.PF, vf eswitch.VF) (Device, error) {
	dir := filepath.Join(s.sys, "bus", "pci", "devices", vf.PCIAddress)
	d := Device{ID: vf.PCIAddress, Index: vf.Index, PF: pf.Netdev, NUMA: -1, Driver: vf.Driver, Netdev: vf.Netdev, Representor: vf.Representor}
	if pf.Bus == "pci" {
		d.PFPCI = pf.Device
	}
	var err error
	if d.Vendor, err = pciID(filepath.Join(dir, "vendor")); err != nil {
		return Device{}, err
	}
	if d.DeviceID, err = pciID(filepath.Join(dir, "device")); err != nil {
		return Device{}, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "numa_node")); err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return Device{}, fmt.Errorf("%s: not an integer: %q", filepath.Join(dir, "numa_node"), strings.TrimSpace(string(b)))
		}
		if n >= 0 {
			d.NUMA = n
		}
	}
	if t, err := os.Readlink(filepath.Join(dir, "iommu_group")); err == nil {
		d.IOMMUGroup = filepath.Base(t)
	}
	return d, nil
}

// pciID reads a PCI ID attribute (0x15b3) as four hex digits; a missing
// one is "" (selectors on it then match nothing).
func pciID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	v := strings.ToLower(strings.TrimSpace(string(b)))
	v = strings.TrimPrefix(v, "0x")
	if !hexID.MatchString(v) {
		return "", fmt.Errorf("%s: %q is not a PCI ID", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
