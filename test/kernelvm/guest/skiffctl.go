package guest

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// Ctl runs the project's skiffctl against the controller at addr.
type Ctl struct {
	T    testing.TB
	Addr string
}

// Run runs skiffctl with args and returns its combined output.
func (c Ctl) Run(args ...string) (string, error) {
	out, err := exec.Command(Bin(c.T, "skiffctl"), append([]string{"--controller", c.Addr}, args...)...).CombinedOutput()
	return string(out), err
}

// Must runs skiffctl with args, failing the test when it fails.
func (c Ctl) Must(args ...string) string {
	c.T.Helper()
	out, err := c.Run(args...)
	if err != nil {
		c.T.Fatalf("skiffctl %v: %v\n%s", args, err, out)
	}
	return out
}

// StartController starts the real skiff-controller in the guest's root
// namespace, listening on addr with its data under dir, waits until it
// answers, and returns a Ctl for it. It is stopped when the test ends.
func StartController(t *testing.T, addr, dir string) Ctl {
	t.Helper()
	ctl := Ctl{T: t, Addr: addr}
	StartIn(t, "", "skiff-controller", "--listen", addr, "--data-dir", filepath.Join(dir, "etcd"))
	testkit.Eventually(t, "controller up", 90*time.Second, func() (bool, string) {
		out, err := ctl.Run("get", "nodes")
		return err == nil, out
	})
	return ctl
}
