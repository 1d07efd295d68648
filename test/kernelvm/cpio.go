package kernelvm

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// cpioEntry is one file of a newc archive.
type cpioEntry struct {
	name   string // without leading slash
	mode   uint32 // type and permission bits
	data   []byte // file content or symlink target
	isDir  bool
	isLink bool
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

// archive collects the files of an initramfs, creating parent directories.
type archive struct {
	entries map[string]*cpioEntry
}

func newArchive() *archive { return &archive{entries: map[string]*cpioEntry{}} }

func (a *archive) dir(name string) {
	name = strings.Trim(name, "/")
	if name == "" || name == "." {
		return
	}
	if _, ok := a.entries[name]; ok {
		return
	}
	a.dir(path.Dir(name))
	a.entries[name] = &cpioEntry{name: name, mode: sIFDIR | 0o755, isDir: true}
}

func (a *archive) file(name string, perm uint32, data []byte) {
	name = strings.Trim(name, "/")
	a.dir(path.Dir(name))
	a.entries[name] = &cpioEntry{name: name, mode: sIFREG | perm, data: data}
}

func (a *archive) symlink(name, target string) {
	name = strings.Trim(name, "/")
	a.dir(path.Dir(name))
	a.entries[name] = &cpioEntry{name: name, mode: sIFLNK | 0o777, data: []byte(target), isLink: true}
}

// write writes the archive in the "newc" format the kernel unpacks,
// parents before children.
func (a *archive) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	ino := uint32(1)
	put := func(name string, mode uint32, data []byte) error {
		nlink := uint32(1)
		if mode&sIFDIR != 0 {
			nlink = 2
		}
		hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
			ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		if _, err := bw.WriteString(hdr + name + "\x00"); err != nil {
			return err
		}
		if err := pad(bw, 110+len(name)+1); err != nil {
			return err
		}
		if _, err := bw.Write(data); err != nil {
			return err
		}
		return pad(bw, len(data))
	}
	for _, n := range names {
		e := a.entries[n]
		if err := put(e.name, e.mode, e.data); err != nil {
			return fmt.Errorf("cpio: %s: %w", n, err)
		}
	}
	if err := put("TRAILER!!!", 0, nil); err != nil {
		return fmt.Errorf("cpio: trailer: %w", err)
	}
	return bw.Flush()
}

func pad(w *bufio.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
