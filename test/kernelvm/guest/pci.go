package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// VirtioRNG returns the PCI address of the virtio-rng function the harness
// gives the VM: a real PCI function, in an IOMMU group, that tests may move
// between drivers (it stands in for a VF's PCI function).
func VirtioRNG(t testing.TB) string {
	t.Helper()
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		v, _ := os.ReadFile(d + "/vendor")
		id, _ := os.ReadFile(d + "/device")
		if strings.TrimSpace(string(v)) == "0x1af4" && (strings.TrimSpace(string(id)) == "0x1005" || strings.TrimSpace(string(id)) == "0x1044") {
			return filepath.Base(d)
		}
	}
	t.Fatalf("no virtio-rng PCI function in the VM (%d PCI devices)", len(devs))
	return ""
}
