// Package atomicfile writes a file so that a reader, or the next start
// after a crash, sees either the old content or the new, never a mix: a
// temporary file in the same directory, written, synced, renamed over the
// name, and the directory synced.
//
//	if err := atomicfile.Write("/var/lib/skiff-agent", "pending.json", b); err != nil {
//		return err
//	}
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces name in dir with b: a temporary file name.* in dir,
// synced, renamed over name (mode 0600), the directory synced. Nothing is left of the temporary
// file on error. Safe for concurrent use on different names; two writers
// of one name leave one of the two contents.
func Write(dir, name string, b []byte) error {
	tmp, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename: a no-op then
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	// The rename itself is kept only once the directory is synced: a
	// caller that goes on to change other files (the agent empties its
	// plan log after a snapshot) must not find them durable and this not.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", name, err)
	}
	return nil
}
