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

// kernelTunables are the global sysctls a kubelet sets at start (kubelet's
// setupKernelTunables); the cluster puts them back when it stops.
var kernelTunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func (c *Cluster) recordSysctls() {
	c.sysctls = map[string]string{}
	for _, k := range kernelTunables {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			c.sysctls[k] = strings.TrimSpace(string(b))
		}
	}
}

// Stop stops every process of the cluster, its pods' containers
// included, unmounts what they mounted under the cluster's directory,
// removes the nodes' cgroups and puts back the sysctls the kubelets
// changed. Idempotent; the namespaces go with the test afterwards.
func (c *Cluster) Stop() {
	var errs []error
	for _, n := range c.Nodes {
		n.proxy.kill()
		n.kubelet.kill()
	}
	for _, n := range c.Nodes {
		errs = append(errs, killCgroup(n.CgroupRoot()))
		killShims(n.ContainerdSocket())
		n.containerd.stop(10 * time.Second)
		killShims(n.ContainerdSocket())
	}
	for _, p := range slices.Backward(c.procs) {
		p.stop(10 * time.Second)
	}
	errs = append(errs, unmountUnder(c.Dir))
	for _, n := range c.Nodes {
		errs = append(errs, removeCgroup(n.CgroupRoot()))
	}
	for k, v := range c.sysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) != v {
			errs = append(errs, os.WriteFile("/proc/sys/"+k, []byte(v), 0o644))
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("cluster: stopping: %v", err)
	}
	if c.t.Failed() {
		for _, p := range append(slices.Clone(c.procs), c.nodeProcs()...) {
			if p != nil {
				c.t.Logf("---- %s (%s)\n%s", p.name, p.log, p.tail(25))
			}
		}
	}
}

func (c *Cluster) nodeProcs() []*proc {
	var out []*proc
	for _, n := range c.Nodes {
		out = append(out, n.containerd, n.kubelet, n.proxy)
	}
	return out
}

// cgroupMounts lists the mount points of the cgroup hierarchies.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) {
			continue
		}
		if fs := fields[i+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out
}

// makeCgroup makes the cgroup root in every hierarchy (the kubelet wants
// its --cgroup-root to exist).
func makeCgroup(root string) error {
	for _, m := range cgroupMounts() {
		if err := os.MkdirAll(filepath.Join(m, root), 0o755); err != nil {
			return fmt.Errorf("cluster: cgroup %s in %s: %w", root, m, err)
		}
	}
	return nil
}

// killCgroup kills every process in the cgroup root's subtree (the pods'
// containers), in every hierarchy, until none is left.
func killCgroup(root string) error {
	for range 50 {
		left := 0
		for _, m := range cgroupMounts() {
			_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, s := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(s); err == nil {
						left++
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if left == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cluster: processes left in cgroup %s", root)
}

// removeCgroup removes the cgroup root's subtree, deepest first.
func removeCgroup(root string) error {
	var errs []error
	for _, m := range cgroupMounts() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd shims serving the containerd at socket
// (their command line names its address).
func killShims(socket string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, socket) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest
// first (pod volumes, overlay snapshots, namespace bind mounts).
func unmountUnder(dir string) error {
	var errs []error
	for range 5 {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var points []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
				points = append(points, unescapeMount(fields[4]))
			}
		}
		f.Close()
		if len(points) == 0 {
			return nil
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		errs = errs[:0]
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("umount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
