package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"first", "second, longer"} {
		if err := Write(dir, "f", []byte(content)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil || string(b) != content {
			t.Fatalf("read %q (%v), want %q", b, err, content)
		}
		if m := perm(t, filepath.Join(dir, "f")); m != 0o600 {
			t.Fatalf("mode %v, want 0600", m)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%d files in the directory, want 1 (no temporary left)", len(es))
	}
	// A directory that is not there: an error naming the file, nothing made.
	err := Write(filepath.Join(dir, "missing"), "f", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "write "+filepath.Join(dir, "missing", "f")+": ") {
		t.Fatalf("write into a missing directory: %v, want an error naming f", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the missing directory: %v, want not made", err)
	}
}

// The file gets exactly the mode asked for, whatever the umask, also when
// it replaces a file of another mode; a missing directory is made, with
// its parents, when a directory mode is given.
func TestWriteWithMode(t *testing.T) {
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "a", "b")
	for _, want := range []fs.FileMode{0o755, 0o644, 0o600, 0o755} {
		if err := WriteWith(dir, "f", []byte(want.String()), Options{Perm: want, DirPerm: 0o750}); err != nil {
			t.Fatal(err)
		}
		if m := perm(t, filepath.Join(dir, "f")); m != want {
			t.Fatalf("mode %v, want %v", m, want)
		}
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		// 0750 less the umask 077.
		if m := perm(t, d); m != 0o700 {
			t.Fatalf("directory %s: mode %v, want 0700", d, m)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%d files in the directory, want 1 (no temporary left)", len(es))
	}
}

// A write that fails leaves the old content and nothing of its temporary
// file: when the rename fails (the name is a directory) and when a sync
// of the temporary file fails.
func TestWriteFailsClean(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "d", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteWith(dir, "d", []byte("x"), Options{Perm: 0o644}); err == nil || !strings.Contains(err.Error(), "write "+filepath.Join(dir, "d")+": ") {
		t.Fatalf("write over a directory: %v, want an error naming d", err)
	}
	if err := Write(dir, "f", []byte("old")); err != nil {
		t.Fatal(err)
	}
	failSync := errors.New("no space left")
	syncFile = func(f *os.File) error { return failSync }
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	if err := Write(dir, "f", []byte("new")); !errors.Is(err, failSync) {
		t.Fatalf("write with a failing sync: %v, want %v", err, failSync)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "old" {
		t.Fatalf("after the failed write: %q (%v), want the old content", b, err)
	}
	var names []string
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"d", "f"}) {
		t.Fatalf("the directory holds %q, want d and f only (no temporary left)", names)
	}
}

// The temporary file is synced before the rename, the directory after it;
// a directory that cannot be synced is an error.
func TestWriteSyncsDirectory(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	syncFile = func(f *os.File) error {
		b, _ := os.ReadFile(filepath.Join(dir, "f"))
		synced = append(synced, fmt.Sprintf("%s:%s", filepath.Base(f.Name()), b))
		return f.Sync()
	}
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	if err := Write(dir, "f", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// What the name held at each sync: nothing while the temporary file
	// was synced, the new content once the directory was.
	if len(synced) != 2 || !strings.HasPrefix(synced[0], "f.") || !strings.HasSuffix(synced[0], ":") ||
		synced[1] != filepath.Base(dir)+":1" {
		t.Fatalf("synced %q, want the temporary file then the directory after the rename", synced)
	}
	failDir := errors.New("input/output error")
	syncFile = func(f *os.File) error {
		if f.Name() == dir {
			return failDir
		}
		return f.Sync()
	}
	if err := Write(dir, "f", []byte("2")); !errors.Is(err, failDir) || !strings.Contains(err.Error(), "sync directory") {
		t.Fatalf("write with a failing directory sync: %v, want %v", err, failDir)
	}
}

// perm is the permission bits of path's mode.
func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}
