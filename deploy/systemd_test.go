// Package deploy holds what installs Skiff: Kubernetes manifests
// (kubernetes/) and systemd units for bare hosts and DPUs (systemd/). Its
// tests check that they are what the tools that read them accept.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits has systemd check every unit as it would load it, in a
// root with the project's binaries where the units expect them.
func TestSystemdUnits(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatalf("systemd-analyze (Debian's systemd; hack/deps.sh installs it): %v", err)
	}
	root := t.TempDir()
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) == 0 {
		t.Fatalf("no units: %v", err)
	}
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd/system", "etc/skiff"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"skiff-agent", "skiff-controller"} {
		src := filepath.Join("..", "bin", b)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("%s (make build first): %v", src, err)
		}
		if err := os.WriteFile(filepath.Join(root, "usr/local/bin", b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The targets units refer to, from this machine's systemd.
	targets, _ := filepath.Glob("/usr/lib/systemd/system/*.target")
	for _, tg := range targets {
		if data, err := os.ReadFile(tg); err == nil {
			_ = os.WriteFile(filepath.Join(root, "usr/lib/systemd/system", filepath.Base(tg)), data, 0o644)
		}
	}
	envs, _ := filepath.Glob("systemd/*.env")
	for _, e := range envs {
		data, _ := os.ReadFile(e)
		if err := os.WriteFile(filepath.Join(root, "etc/skiff", filepath.Base(e)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	for _, u := range units {
		data, _ := os.ReadFile(u)
		p := filepath.Join(root, "etc/systemd/system", filepath.Base(u))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		// Every EnvironmentFile a unit reads is shipped as an example.
		for _, l := range strings.Split(string(data), "\n") {
			if f, ok := strings.CutPrefix(l, "EnvironmentFile=/etc/skiff/"); ok {
				if _, err := os.Stat(filepath.Join("systemd", f)); err != nil {
					t.Errorf("%s reads /etc/skiff/%s, which systemd/ does not ship", u, f)
				}
			}
		}
	}
	out, err := exec.Command("systemd-analyze", append([]string{"--root=" + root, "verify"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
