// Package atomicfile writes a file so that a reader, or the next start
// after a crash, sees either the old content or the new, never a mix: a
// temporary file in the same directory, written, synced, renamed over the
// name, and the directory synced.
//
// Write makes a file of mode 0600 in a directory that is there:
//
//	if err := atomicfile.Write("/var/lib/skiff-agent", "pending.json", b); err != nil {
//		return err
//	}
//
// WriteWith takes the file's mode, and makes the directory when it is
// missing if told its mode:
//
//	err := atomicfile.WriteWith("/opt/cni/bin", "skiff-cni", bin, atomicfile.Options{Perm: 0o755, DirPerm: 0o755})
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Options say how WriteWith makes the file and its directory.
type Options struct {
	// Perm is the file's mode (permission bits, and setuid, setgid and
	// sticky), set exactly, whatever the umask; 0 is 0600.
	Perm fs.FileMode
	// DirPerm, when not 0, has the directory made, with its missing
	// parents, of this mode (less the umask) before the file is written;
	// when 0 a missing directory is an error.
	DirPerm fs.FileMode
}

// Write replaces name in dir with b, of mode 0600: WriteWith with no
// options.
func Write(dir, name string, b []byte) error {
	return WriteWith(dir, name, b, Options{})
}

// syncFile syncs a file to disk; a test replaces it to see what is
// synced, or to make a sync fail.
var syncFile = (*os.File).Sync

// WriteWith replaces name in dir with b: a temporary file name.* in dir,
// of mode o.Perm, synced, renamed over name, the directory synced. Nothing
// is left of the temporary file on error. Safe for concurrent use on
// different names; two writers of one name leave one of the two contents.
// Errors name the file (dir/name).
func WriteWith(dir, name string, b []byte, o Options) error {
	path := filepath.Join(dir, name)
	perm := o.Perm
	if perm == 0 {
		perm = 0o600
	}
	if o.DirPerm != 0 {
		if err := os.MkdirAll(dir, o.DirPerm); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	tmp, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(tmp, b, perm); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename itself is kept only once the directory is synced: a
	// caller that goes on to change other files (the agent empties its
	// plan log after a snapshot) must not find them durable and this not.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err := syncFile(d); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

// fill gives the temporary file f its mode and content, syncs and closes
// it.
func fill(f *os.File, b []byte, perm fs.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
