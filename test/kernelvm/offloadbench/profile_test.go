package offloadbench

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
)

// profile runs step n times under a CPU profile written to
// $SKIFF_KERNELVM_OUT/offloadbench-NAME.pprof (the guest's init sets it),
// which the host keeps with hack/kernelvm/run.sh -keep DIR. The steps
// repeat the timed ones after their figures were taken, so profiling
// changes no figure.
func profile(t *testing.T, name string, n int, step func()) {
	t.Helper()
	dir := os.Getenv("SKIFF_KERNELVM_OUT")
	if dir == "" {
		t.Fatal("$SKIFF_KERNELVM_OUT is not set: run the test through hack/kernelvm/run.sh")
	}
	f, err := os.Create(filepath.Join(dir, "offloadbench-"+name+".pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A step takes milliseconds: sample more often than the default
	// 100 Hz (StartCPUProfile then warns that the rate is already set).
	runtime.SetCPUProfileRate(1000)
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	for range n {
		step()
	}
	pprof.StopCPUProfile()
	runtime.SetCPUProfileRate(0)
}
