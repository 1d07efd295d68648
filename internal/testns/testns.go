// Package testns gives privileged tests throwaway network namespaces and a
// way to run iproute2 inside them. Tests that need root call Require first:
// it fails the test (never skips) when not root, because the privileged
// tiers must run for real in CI, which runs as root.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Require fails the test unless it runs as root.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces); run `make test` as root")
	}
}

// New creates a namespace named skt-<random> and deletes it when the test
// ends. It returns the name; its path is /var/run/netns/NAME.
func New(t testing.TB) string {
	t.Helper()
	Require(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "skt-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	Run(t, name, "ip", "link", "set", "lo", "up")
	return name
}

// Path returns the filesystem path of namespace name.
func Path(name string) string { return "/var/run/netns/" + name }

// Run runs a command inside namespace ns and returns its output; it fails
// the test when the command fails.
func Run(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := Try(ns, args...)
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// Try runs a command inside namespace ns and returns its output and error.
func Try(ns string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// JSON runs a command inside ns (iproute2 with -j) and decodes its output.
func JSON(t testing.TB, ns string, v any, args ...string) {
	t.Helper()
	out := Run(t, ns, args...)
	if strings.TrimSpace(out) == "" {
		out = "[]"
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("in %s: %s: decode: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
}
