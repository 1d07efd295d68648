package nl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// sysctlPath is the /proc/sys file of a sysctl named by its path
// ("net/ipv4/ip_forward"); names that climb out are refused.
func sysctlPath(name string) (string, error) {
	p := filepath.Join("/proc/sys", name)
	if !strings.HasPrefix(p, "/proc/sys/") || strings.Contains(name, "..") {
		return "", fmt.Errorf("nl: sysctl %q: not a name under /proc/sys", name)
	}
	return p, nil
}

// Sysctl reads the file on a thread in the namespace: /proc/sys/net
// follows the reading thread's network namespace.
func (k *real) Sysctl(name string) (string, error) {
	p, err := sysctlPath(name)
	if err != nil {
		return "", err
	}
	var b []byte
	err = InNetNS(k.path, func() error {
		var err error
		b, err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("nl: sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (k *real) SetSysctl(name, value string) error {
	p, err := sysctlPath(name)
	if err != nil {
		return err
	}
	k.w()
	if err := InNetNS(k.path, func() error { return os.WriteFile(p, []byte(value), 0o644) }); err != nil {
		return fmt.Errorf("nl: sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

// LoadModule runs modprobe unless /sys/module holds the module (built
// in, or loaded).
func (k *real) LoadModule(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/module", name)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("nl: module %s: %w", name, err)
	}
	k.w()
	if out, err := exec.Command("modprobe", name).CombinedOutput(); err != nil {
		return fmt.Errorf("nl: modprobe %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
