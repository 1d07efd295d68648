package eswitch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// PathError is a problem with one sysfs path: the path and why it is wrong.
type PathError struct {
	Path   string
	Reason string
	Err    error // may be nil
}

func (e *PathError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Reason)
}

func (e *PathError) Unwrap() error { return e.Err }

func pathErr(path, reason string, err error) error {
	return &PathError{Path: path, Reason: reason, Err: err}
}

// readAttr reads a sysfs attribute and trims it. ok is false when the
// attribute does not exist or the driver does not implement it (sysfs
// answers EOPNOTSUPP or EINVAL on read, as for phys_port_name on a
// netdev without a switch port).
func readAttr(path string) (val string, ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENODEV) {
			return "", false, nil
		}
		return "", false, pathErr(path, "cannot read", err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// readInt reads an integer attribute; ok is false when it does not exist.
func readInt(path string) (n int, ok bool, err error) {
	s, ok, err := readAttr(path)
	if err != nil || !ok {
		return 0, ok, err
	}
	n, err = strconv.Atoi(s)
	if err != nil {
		return 0, false, pathErr(path, fmt.Sprintf("not an integer: %q", s), nil)
	}
	return n, true, nil
}

// linkBase resolves a symlink and returns the last element of its target.
// ok is false when the link does not exist.
func linkBase(path string) (string, bool, error) {
	t, err := os.Readlink(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, pathErr(path, "not a symlink", err)
	}
	return filepath.Base(t), true, nil
}

// resolve follows a symlink to a directory that must exist.
func resolve(path string) (string, error) {
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", pathErr(path, "broken link", err)
	}
	return p, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
