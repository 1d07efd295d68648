package eswitch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// TestNetlinkDevlink: the modes devlink reports, as Devlink says them
// (a device without an eswitch, or none at all: ErrNoEswitch), and mode
// changes.
func TestNetlinkDevlink(t *testing.T) {
	ctx := context.Background()
	dl := devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev", "pci/0000:03:00.1": "legacy", "pci/0000:00:1f.6": ""})
	for h, want := range map[string]Mode{"pci/0000:03:00.0": ModeSwitchdev, "pci/0000:03:00.1": ModeLegacy} {
		if m, err := dl.EswitchMode(ctx, h); err != nil || m != want {
			t.Errorf("EswitchMode(%s) = %q %v, want %q", h, m, err, want)
		}
	}
	for _, h := range []string{"pci/0000:00:1f.6", "pci/0000:99:00.0"} {
		if m, err := dl.EswitchMode(ctx, h); !errors.Is(err, ErrNoEswitch) || m != ModeNone {
			t.Errorf("EswitchMode(%s) = %q %v, want ErrNoEswitch", h, m, err)
		}
	}
	if _, err := dl.EswitchMode(ctx, "0000:03:00.0"); err == nil || !strings.Contains(err.Error(), "not bus/device") {
		t.Errorf("a handle without a bus: %v", err)
	}
	if err := dl.SetEswitchMode(ctx, "pci/0000:03:00.1", ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	if m, _ := dl.EswitchMode(ctx, "pci/0000:03:00.1"); m != ModeSwitchdev {
		t.Errorf("mode after the change: %q", m)
	}
	if err := dl.SetEswitchMode(ctx, "pci/0000:00:1f.6", ModeSwitchdev); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("a mode change without an eswitch: %v, want EOPNOTSUPP", err)
	}
	if err := dl.SetEswitchMode(ctx, "pci/0000:99:00.0", ModeSwitchdev); !errors.Is(err, unix.ENODEV) {
		t.Errorf("a mode change of a missing device: %v, want ENODEV", err)
	}
	if n := dl.Kernel.(nl.Kernel).Writes(); n != 3 {
		t.Errorf("%d devlink writes, want 3 (every change asked)", n)
	}
}
