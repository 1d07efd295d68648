package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CNI runs the project's skiff-cni: command cmd (ADD, DEL, STATUS), the
// network configuration conf on stdin, and env the CNI_ variables
// ("CNI_CONTAINERID=...", CNI_NETNS, CNI_IFNAME, CNI_ARGS; CNI_COMMAND and
// CNI_PATH are set here). It returns stdout and how long the exec took;
// a failure's error holds both outputs.
func CNI(t testing.TB, cmd, conf string, env ...string) (string, time.Duration, error) {
	bin := Bin(t, "skiff-cni")
	c := exec.Command(bin)
	c.Env = append(append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_PATH="+filepath.Dir(bin)), env...)
	c.Stdin = strings.NewReader(conf)
	var out, errOut strings.Builder
	c.Stdout, c.Stderr = &out, &errOut
	start := time.Now()
	err := c.Run()
	took := time.Since(start)
	if err != nil {
		return "", took, fmt.Errorf("skiff-cni %s %s: %v: %s %s", cmd, strings.Join(env, " "), err, out.String(), errOut.String())
	}
	return out.String(), took, nil
}
