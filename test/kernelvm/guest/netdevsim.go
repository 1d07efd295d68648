package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// Netdevsim is a netdevsim device created for a test.
type Netdevsim struct {
	ID  int
	Dir string // /sys/bus/netdevsim/devices/netdevsim<ID>
}

// Handle is the devlink handle, netdevsim/netdevsim<ID>.
func (n *Netdevsim) Handle() string { return fmt.Sprintf("netdevsim/netdevsim%d", n.ID) }

// NewNetdevsim creates netdevsim device id with ports ports and removes it
// when the test ends.
func NewNetdevsim(t testing.TB, id, ports int) *Netdevsim {
	t.Helper()
	const bus = "/sys/bus/netdevsim"
	if err := os.WriteFile(bus+"/new_device", fmt.Appendf(nil, "%d %d", id, ports), 0); err != nil {
		t.Fatalf("netdevsim: new_device %d %d: %v", id, ports, err)
	}
	n := &Netdevsim{ID: id, Dir: fmt.Sprintf("%s/devices/netdevsim%d", bus, id)}
	t.Cleanup(func() {
		if err := os.WriteFile(bus+"/del_device", fmt.Appendf(nil, "%d", id), 0); err != nil {
			t.Errorf("netdevsim: del_device %d: %v", id, err)
		}
	})
	// Netdevs appear asynchronously after the write returns.
	testkit.Eventually(t, fmt.Sprintf("netdevsim%d: %d port netdevs", id, ports), 5*time.Second, func() (bool, string) {
		got := n.Netdevs(t)
		return len(got) >= ports, fmt.Sprintf("netdevs %v", got)
	})
	return n
}

// Netdevs lists the netdevs whose device is this netdevsim device (ports
// and, in switchdev mode, representors).
func (n *Netdevsim) Netdevs(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	want, err := filepath.EvalSymlinks(n.Dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", e.Name(), "device"))
		if err == nil && dev == want {
			out = append(out, e.Name())
		}
	}
	return out
}
