package guest

import (
	"os/exec"
	"testing"
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
