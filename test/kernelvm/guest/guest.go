// Package guest is for tests that run inside the kernel VM of package
// kernelvm: Require skips a test outside the VM; helpers create kernel
// objects the VM's kernel has and clean them up.
package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Env is the variable the kernel VM harness sets to 1 in the guest.
const Env = "SKIFF_KERNELVM"

// Inside reports whether this process runs in the kernel VM.
func Inside() bool { return os.Getenv(Env) == "1" }

// Require skips t unless it runs inside the kernel VM. The harness fails a
// run in which any test skips, so a gated test cannot silently not run
// there.
func Require(t testing.TB) {
	t.Helper()
	if !Inside() {
		t.Skipf("needs the kernel VM (%s=1): run hack/kernelvm/run.sh with this package", Env)
	}
}

// BinEnv names the guest directory holding the project's static binaries
// (skiff-agent, skiff-controller, skiffctl), built by the harness.
const BinEnv = "SKIFF_BIN"

// Bin returns the path of the project binary name in $SKIFF_BIN, failing
// t when it is not there (the harness was run with -bins "" or without
// that command).
func Bin(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv(BinEnv)
	if dir == "" {
		t.Fatalf("$%s is not set: run the test through hack/kernelvm/run.sh", BinEnv)
	}
	p := filepath.Join(dir, name)
	if _, err := exec.LookPath(p); err != nil {
		t.Fatalf("%s: %v (the harness builds ./cmd/%s with -bins)", p, err, name)
	}
	return p
}
