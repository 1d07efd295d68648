package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// What a cluster changes on the machine, and how it is put back even when
// a test process dies before it could stop its cluster (a go test timeout,
// a kill): every running cluster has a record under stateDir; the next
// cluster to start cleans up after the dead ones. Clusters of several test
// processes may run at once; they share the host's state through these
// records, under a lock.

// stateDir holds the records: lock, host.json, clusters/<id>.json.
// sysctlDir is where the sysctls are read and written (variables for the
// unit test).
var (
	stateDir  = "/run/skiff-k8s-test"
	sysctlDir = "/proc/sys"
)

// record is one running cluster: what must go when it is gone.
type record struct {
	ID      string   `json:"id"`
	PID     int      `json:"pid"`
	Started uint64   `json:"started"` // the test process's start time (clock ticks), against pid reuse
	Dir     string   `json:"dir"`
	Cgroup  string   `json:"cgroup"`
	Netns   []string `json:"netns"`
}

// hostState is what the first running cluster found on the machine.
type hostState struct {
	// Sysctls holds the global sysctls a kubelet sets, as they were.
	Sysctls map[string]string `json:"sysctls"`
	// Made lists the mount point directories the clusters made.
	Made []string `json:"made"`
}

// kernelTunables are the global sysctls a kubelet sets when it starts
// (the kubelet's setupKernelTunables).
var kernelTunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// hostMounts are paths the kubelet and containerd use whatever their
// flags say (the kubelet's device plugin directory and container log
// links, libcni's cache, runc's state and the shims' sockets): each node
// has its own, bound over these in its mount namespace.
var hostMounts = []string{"/var/lib/kubelet", "/var/lib/cni", "/var/log/containers", "/run/containerd"}

// withHostLock runs f holding the machine-wide lock of the clusters.
func withHostLock(f func() error) error {
	if err := os.MkdirAll(filepath.Join(stateDir, "clusters"), 0o700); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	l, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer l.Close()
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("cluster: lock %s: %w", l.Name(), err)
	}
	defer syscall.Flock(int(l.Fd()), syscall.LOCK_UN)
	return f()
}

// processStart is the start time of process pid (field 22 of its stat),
// 0 when there is no such process.
func processStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

func (r record) alive() bool { return r.Started != 0 && processStart(r.PID) == r.Started }

func readRecords() ([]record, error) {
	ents, err := os.ReadDir(filepath.Join(stateDir, "clusters"))
	if err != nil {
		return nil, err
	}
	var out []record
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(stateDir, "clusters", e.Name()))
		if err != nil {
			return nil, err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
			return nil, fmt.Errorf("cluster: record %s: %v", e.Name(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

func writeJSON(file string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// reap cleans up after the clusters whose test process is gone, and
// returns how many clusters other than self remain (running, or dead
// and not cleaned up: their changes to the host may still be in force),
// and what could not be cleaned up (retried next time).
func reap(self string) (others int, stale error) {
	recs, err := readRecords()
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, o := range recs {
		switch {
		case o.ID == self:
		case o.alive():
			others++
		default:
			if err := cleanup(o); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s of dead process %d: %w", o.ID, o.PID, err))
				others++
			}
		}
	}
	return others, errors.Join(errs...)
}

// register cleans up after dead clusters (reap), records the host's
// state when no other cluster runs, makes the mount points, and records
// r.
func register(r record) (stale, err error) {
	err = withHostLock(func() error {
		var others int
		others, stale = reap(r.ID)
		hostFile := filepath.Join(stateDir, "host.json")
		if others == 0 {
			// Left by a test process that died as the last one running:
			// its values are the machine's own.
			if err := restoreHost(hostFile); err != nil {
				return err
			}
		}
		var h hostState
		if b, err := os.ReadFile(hostFile); err == nil {
			if err := json.Unmarshal(b, &h); err != nil {
				return fmt.Errorf("cluster: %s: %w", hostFile, err)
			}
		} else {
			h.Sysctls = map[string]string{}
			for _, k := range kernelTunables {
				if b, err := os.ReadFile(filepath.Join(sysctlDir, k)); err == nil {
					h.Sysctls[k] = strings.TrimSpace(string(b))
				}
			}
		}
		for _, d := range hostMounts {
			if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("cluster: %w", err)
				}
				h.Made = append(h.Made, d)
			}
		}
		if err := writeJSON(hostFile, h); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		return writeJSON(filepath.Join(stateDir, "clusters", r.ID+".json"), r)
	})
	return stale, err
}

// unregister cleans up r (and dead clusters) and drops its record; the
// last cluster out puts the host's state back.
// What could not be cleaned up of other, dead, clusters is returned as
// stale.
func unregister(r record) (stale, err error) {
	err = withHostLock(func() error {
		if err := cleanup(r); err != nil {
			return err
		}
		var others int
		others, stale = reap(r.ID)
		if others == 0 {
			return restoreHost(filepath.Join(stateDir, "host.json"))
		}
		return nil
	})
	return stale, err
}

// restoreHost puts back the sysctls and removes the mount points of the
// host state in file, and the file.
func restoreHost(file string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var h hostState
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("cluster: %s: %w", file, err)
	}
	var errs []error
	for k, v := range h.Sysctls {
		if b, err := os.ReadFile(filepath.Join(sysctlDir, k)); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile(filepath.Join(sysctlDir, k), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s: %w", k, err))
			}
		}
	}
	for _, d := range h.Made {
		// Only if empty: something else may have come to use it.
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.Remove(file)
}

// cleanup removes everything of the cluster r: its processes (by
// cgroup: the control plane, containerd and its shims, the kubelets and
// the pods' containers), its mounts, cgroups, namespaces, directory and
// record. Idempotent.
func cleanup(r record) error {
	var errs []error
	if r.Cgroup != "" {
		errs = append(errs, killCgroup(r.Cgroup))
	}
	if r.Dir != "" {
		errs = append(errs, unmountUnder(r.Dir))
	}
	if r.Cgroup != "" {
		errs = append(errs, removeCgroup(r.Cgroup))
	}
	for _, ns := range r.Netns {
		if _, err := os.Stat(testkit.Path(ns)); err == nil {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, out))
			}
		}
	}
	if r.Dir != "" {
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // the record stays: the next cluster to start tries again
	}
	if err := os.Remove(filepath.Join(stateDir, "clusters", r.ID+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
