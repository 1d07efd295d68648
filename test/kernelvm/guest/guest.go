// Package guest is for tests that run inside the kernel VM of package
// kernelvm: Require skips a test outside the VM; helpers create kernel
// objects the VM's kernel has and clean them up.
package guest

import (
	"os"
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
