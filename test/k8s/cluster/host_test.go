package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHostState walks the machine-wide records through their
// transitions, on a fake /proc/sys and state directory: the first
// cluster records the sysctls as they are, the last one out puts them
// back, a dead test process's cluster is reaped and its host state
// restored when it was the last, and mount points made are removed.
func TestHostState(t *testing.T) {
	dir := t.TempDir()
	oldState, oldSysctl, oldMounts := stateDir, sysctlDir, hostMounts
	t.Cleanup(func() { stateDir, sysctlDir, hostMounts = oldState, oldSysctl, oldMounts })
	stateDir, sysctlDir = filepath.Join(dir, "state"), filepath.Join(dir, "sys")
	mountPoint := filepath.Join(dir, "var-lib-kubelet")
	hostMounts = []string{mountPoint}
	set := func(v string) {
		for _, k := range kernelTunables {
			p := filepath.Join(sysctlDir, k)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(step, want string) {
		t.Helper()
		for _, k := range kernelTunables {
			b, _ := os.ReadFile(filepath.Join(sysctlDir, k))
			if string(b) != want && string(b) != want+"\n" {
				t.Errorf("%s: %s = %q, want %q", step, k, b, want)
			}
		}
	}
	self := processStart(os.Getpid())
	live := func(id string) record { return record{ID: id, PID: os.Getpid(), Started: self} }
	dead := func(id string) record { return record{ID: id, PID: os.Getpid(), Started: self + 1} }
	reg := func(r record) {
		t.Helper()
		if stale, err := register(r); err != nil || stale != nil {
			t.Fatalf("register %s: %v %v", r.ID, stale, err)
		}
	}
	unreg := func(r record) {
		t.Helper()
		if stale, err := unregister(r); err != nil || stale != nil {
			t.Fatalf("unregister %s: %v %v", r.ID, stale, err)
		}
	}

	set("0")
	reg(live("a"))
	if _, err := os.Stat(mountPoint); err != nil {
		t.Errorf("mount point not made: %v", err)
	}
	set("7") // a kubelet of a
	reg(live("b"))
	unreg(live("a"))
	check("a stopped, b runs", "7")
	unreg(live("b"))
	check("last one out", "0")
	if _, err := os.Stat(mountPoint); err == nil {
		t.Error("the mount point the clusters made is still there")
	}
	if _, err := os.Stat(filepath.Join(stateDir, "host.json")); err == nil {
		t.Error("host.json is still there after the last cluster")
	}

	// A test process dies with its cluster running; the next cluster
	// finds it dead, reaps it, and restores the host before recording.
	reg(dead("c"))
	set("7")
	reg(live("d"))
	check("after reaping a dead cluster", "0")
	if _, err := os.Stat(filepath.Join(stateDir, "clusters", "c.json")); err == nil {
		t.Error("the dead cluster's record is still there")
	}
	set("7")
	unreg(live("d"))
	check("d out", "0")
}
