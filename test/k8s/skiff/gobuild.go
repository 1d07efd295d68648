package skiff

import (
	"os"
	"os/exec"
)

// goBuild builds pkg (relative to root) into dir as a static binary.
func goBuild(dir, root, pkg string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-o", dir+"/", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.CombinedOutput()
}
