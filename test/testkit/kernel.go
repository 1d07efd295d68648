package testkit

import (
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

// Open opens the network namespace at path ("": the caller's) through
// open (nl.Open, or a kernel fake's World.Open), failing t; the handle is
// closed when the test ends.
func Open(t testing.TB, open nl.OpenFunc, path string) nl.Kernel {
	t.Helper()
	k, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// Devlink is the host namespace of a kernel fake (internal/nl/nltest)
// holding the devlink devices of modes, each "bus/device"
// (pci/0000:03:00.0, netdevsim/netdevsim10) to its eswitch mode
// ("legacy", "switchdev"; "" for a device without an eswitch), and a
// handle k on it. eswitch.NetlinkDevlink{Kernel: k} is the devlink eswitch
// discovery takes; k.SetEswitchMode changes a mode as devlink does (and
// counts in k.Writes); the NS stages more devices (AddDevlink).
func Devlink(t testing.TB, modes map[string]string) (nl.Kernel, *nltest.NS) {
	t.Helper()
	w := nltest.New()
	for h, mode := range modes {
		bus, dev, ok := strings.Cut(h, "/")
		if !ok {
			t.Fatalf("testkit: devlink handle %q is not bus/device", h)
		}
		w.NS("").AddDevlink(bus, dev, mode)
	}
	return Open(t, w.Open, ""), w.NS("")
}
