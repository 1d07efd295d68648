package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/skiff-sdn/skiff/internal/images"
)

// TestImages builds the test cluster's own programs (the pause process
// and the probe tool) into dir and writes the pause image (tagged as
// containerd's sandbox image) and the test pod image
// (skiff.local/testpod:dev: busybox and probe) there, for
// Options.Images.
func TestImages(t testing.TB, dir string) (pause, testpod string) {
	t.Helper()
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/",
		"github.com/skiff-sdn/skiff/test/k8s/images/pause", "github.com/skiff-sdn/skiff/test/k8s/images/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the pause and probe programs: %v\n%s", err, out)
	}
	pause, testpod = filepath.Join(dir, "pause.tar"), filepath.Join(dir, "testpod.tar")
	if err := images.Write("pause", dir, pause); err != nil {
		t.Fatal(err)
	}
	if err := images.Write("testpod", dir, testpod); err != nil {
		t.Fatal(err)
	}
	return pause, testpod
}
