package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A cluster's processes live in cgroups under one root of its own,
// /skiff-k8s-<id>: control/ holds the control plane, <node>/node a node's
// containerd, kubelet, kube-proxy and containerd's shims, <node>/pods the
// kubelet's cgroup root (its pods' containers). Killing every process of
// the subtree stops the whole cluster, whatever started what.

// hierarchy is a mounted cgroup hierarchy.
type hierarchy struct {
	mount string
	v2    bool
	opts  []string // the v1 controllers (and name=) it holds
}

func hierarchies() []hierarchy {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []hierarchy
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+3 >= len(fields) {
			continue
		}
		switch fields[i+1] {
		case "cgroup":
			out = append(out, hierarchy{mount: unescapeMount(fields[4]), opts: strings.Split(fields[i+3], ",")})
		case "cgroup2":
			out = append(out, hierarchy{mount: unescapeMount(fields[4]), v2: true})
		}
	}
	return out
}

// trackMount is the hierarchy the cluster's own processes are placed in
// (one is enough to find them all): the v2 one when mounted (alone or
// beside v1, where it has no controllers), else v1's pids or memory.
func trackMount() string {
	hs := hierarchies()
	for _, want := range []string{"", "pids", "memory"} {
		for _, h := range hs {
			if (want == "" && h.v2) || (want != "" && slices.Contains(h.opts, want)) {
				return h.mount
			}
		}
	}
	if len(hs) > 0 {
		return hs[0].mount
	}
	return "/sys/fs/cgroup"
}

// procsFile is the cgroup.procs file of group in the tracking hierarchy.
func procsFile(group string) string {
	return filepath.Join(trackMount(), group, "cgroup.procs")
}

// makeCgroup makes group in every hierarchy (the kubelet wants its cgroup
// root to exist in all). A new v1 cpuset group gets its parent's CPUs and
// memory nodes, or no process could join it.
func makeCgroup(group string) error {
	for _, h := range hierarchies() {
		cpuset := slices.Contains(h.opts, "cpuset")
		p := h.mount
		for _, part := range strings.Split(strings.Trim(group, "/"), "/") {
			parent := p
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cluster: cgroup %s: %w", p, err)
			}
			if !cpuset {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if b, _ := os.ReadFile(filepath.Join(p, f)); strings.TrimSpace(string(b)) != "" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(parent, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(p, f), b, 0o644)
				}
				if err != nil {
					return fmt.Errorf("cluster: cgroup %s: %s: %w", p, f, err)
				}
			}
		}
	}
	return nil
}

// cgroupPids lists the processes in group's subtree, in every hierarchy.
func cgroupPids(group string) []int {
	seen := map[int]bool{}
	var out []int
	for _, h := range hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h.mount, group), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// killCgroup kills every process in group's subtree until none is left.
func killCgroup(group string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := cgroupPids(group)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: processes %v left in cgroup %s", pids, group)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroup removes group's subtree in every hierarchy, deepest first.
// Its processes must be gone (killCgroup); a cgroup whose last process
// is still exiting is retried for a while.
func removeCgroup(group string) error {
	var errs []error
	for _, h := range hierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h.mount, group), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			var err error
			for range 100 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
