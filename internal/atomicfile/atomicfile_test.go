package atomicfile

import (
	"os"
	"path/filepath"
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
		if st, err := os.Stat(filepath.Join(dir, "f")); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v (%v), want 0600", st.Mode().Perm(), err)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%d files in the directory, want 1 (no temporary left)", len(es))
	}
	// A directory that is not there: an error naming the file, nothing made.
	if err := Write(filepath.Join(dir, "missing"), "f", []byte("x")); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}
