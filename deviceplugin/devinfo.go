package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

// DefaultDevInfoDir is where the Network Plumbing WG device-info
// specification (v1.1.0, section 4.1) puts device plugins' files.
const DefaultDevInfoDir = "/var/run/k8s.cni.cncf.io/devinfo/dp"

// DevInfoVersion is the version of the device-info specification the
// files follow.
const DevInfoVersion = "1.1.0"

// DevInfo is a device-info file (specification section 3): type "pci".
type DevInfo struct {
	Type    string      `json:"type"`
	Version string      `json:"version"`
	PCI     *PCIDevInfo `json:"pci,omitempty"`
}

// PCIDevInfo is the "pci" map of a device-info file.
type PCIDevInfo struct {
	PCIAddress        string `json:"pci-address"`
	PFPCIAddress      string `json:"pf-pci-address,omitempty"`
	RepresentorDevice string `json:"representor-device,omitempty"`
}

// devInfoOf is the device-info of a VF.
func devInfoOf(d Device) DevInfo {
	return DevInfo{Type: "pci", Version: DevInfoVersion, PCI: &PCIDevInfo{PCIAddress: d.ID, PFPCIAddress: d.PFPCI, RepresentorDevice: d.Representor}}
}

// DevInfoPath is the file of a device of a resource in dir:
// <resource, "/" replaced by "-">-<device ID>-device.json.
func DevInfoPath(dir, resource, id string) string {
	return filepath.Join(dir, strings.ReplaceAll(resource, "/", "-")+"-"+id+"-device.json")
}

// ReadDevInfo reads a device-info file.
func ReadDevInfo(path string) (DevInfo, error) {
	var di DevInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return di, fmt.Errorf("deviceplugin: device-info: %w", err)
	}
	if err := json.Unmarshal(b, &di); err != nil {
		return di, fmt.Errorf("deviceplugin: device-info %s: %w", path, err)
	}
	return di, nil
}

// writeDevInfo writes a device's file whole or not at all
// (atomicfile), readable by root only. The directory is made, root's
// only, when missing.
func writeDevInfo(dir, resource string, d Device) error {
	b, err := json.Marshal(devInfoOf(d))
	if err != nil {
		return err
	}
	name := filepath.Base(DevInfoPath(dir, resource, d.ID))
	if err := atomicfile.WriteWith(dir, name, append(b, '\n'), atomicfile.Options{Perm: 0o600, DirPerm: 0o700}); err != nil {
		return fmt.Errorf("deviceplugin: device-info: %w", err)
	}
	return nil
}

// pciAddr is a PCI address (domain:bus:device.function) as sysfs names
// functions.
var pciAddr = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// removeDevInfo removes the files of a resource in dir (the
// specification has the plugin delete its files when it stops).
func removeDevInfo(dir, resource string) error {
	prefix := strings.ReplaceAll(resource, "/", "-") + "-"
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deviceplugin: device-info dir: %w", err)
	}
	var errs []error
	for _, e := range ents {
		mid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		if mid, ok = strings.CutSuffix(mid, "-device.json"); ok && pciAddr.MatchString(mid) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// EnvName is the environment variable Allocate sets to the allocated
// VFs' PCI addresses, comma-separated: PCIDEVICE_ and the resource name
// upper-cased with every character other than a letter, digit or _
// made _ (skiff.io/vf -> PCIDEVICE_SKIFF_IO_VF).
func EnvName(resource string) string {
	var b strings.Builder
	b.WriteString("PCIDEVICE_")
	for _, r := range strings.ToUpper(resource) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
