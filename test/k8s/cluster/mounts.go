package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// shareDir makes dir a shared mount (a bind mount onto itself): mounts
// made under it in a node's mount namespace (pod volumes, containerd's
// snapshots and pod network namespaces) appear in the test's namespace
// and every other node's, and the other way round. unmountUnder(dir)
// removes it.
func shareDir(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("cluster: bind mount %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return fmt.Errorf("cluster: make %s shared: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(points), nil
}

// unmountUnder lazily unmounts every mount point at or under dir, deepest
// first (pod volumes, overlay snapshots, namespace bind mounts, the
// shared bind mount of shareDir), until none is left.
func unmountUnder(dir string) error {
	var errs []error
	for range 10 {
		points, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("umount %s: %w", p, err))
			}
		}
	}
	points, _ := mountsUnder(dir)
	return errors.Join(append(errs, fmt.Errorf("cluster: mounts left under %s: %v", dir, points))...)
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
