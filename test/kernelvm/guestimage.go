package kernelvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Guest is a small Linux guest for tests that boot a VM of their own on
// the host (a VM on a Skiff port, for example): Debian's kernel from the
// prepared cache and an initramfs the caller describes.
type Guest struct {
	Kernel    string // vmlinuz
	Initramfs string // newc cpio
}

// GuestFile is a file of a guest's initramfs.
type GuestFile struct {
	Path string // inside the guest, without the leading slash
	Mode uint32
	Data []byte
}

// BuildGuest writes to dir an initramfs holding busybox (/bin/busybox),
// the modules asked for with their dependencies (decompressed, at
// /lib/modules/NAME.ko, their load order in /modules.list), and files
// (among them an executable "init"), for the kernel that
// hack/kernelvm/setup.sh prepared in cacheDir (DefaultCacheDir when
// empty). The guest's init loads the modules itself.
func BuildGuest(cacheDir, dir string, modules []string, files []GuestFile) (Guest, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	b, err := os.ReadFile(filepath.Join(cacheDir, "current"))
	if err != nil {
		return Guest{}, fmt.Errorf("kernelvm: no prepared kernel (run hack/kernelvm/setup.sh): %w", err)
	}
	version := strings.TrimSpace(string(b))
	verDir := filepath.Join(cacheDir, version)
	order, paths, err := moduleOrder(filepath.Join(verDir, "root", "lib", "modules", version), modules)
	if err != nil {
		return Guest{}, fmt.Errorf("kernelvm: guest modules: %w", err)
	}
	a := newArchive()
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return Guest{}, fmt.Errorf("kernelvm: busybox (install busybox-static): %w", err)
	}
	a.file("bin/busybox", 0o755, bb)
	a.file("modules.list", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	for _, m := range order {
		ko, err := readModule(filepath.Join(verDir, "root", "lib", "modules", version, paths[m]))
		if err != nil {
			return Guest{}, fmt.Errorf("kernelvm: module %s: %w", m, err)
		}
		a.file("lib/modules/"+m+".ko", 0o644, ko)
	}
	for _, f := range files {
		a.file(f.Path, f.Mode, f.Data)
	}
	out, err := os.Create(filepath.Join(dir, "guest.cpio"))
	if err != nil {
		return Guest{}, fmt.Errorf("kernelvm: %w", err)
	}
	if err := a.write(out); err != nil {
		out.Close()
		return Guest{}, fmt.Errorf("kernelvm: guest initramfs: %w", err)
	}
	if err := out.Close(); err != nil {
		return Guest{}, fmt.Errorf("kernelvm: guest initramfs: %w", err)
	}
	return Guest{Kernel: filepath.Join(verDir, "vmlinuz"), Initramfs: out.Name()}, nil
}

// readModule returns a module file's contents, decompressed.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".xz"):
		return exec.Command("xz", "-dc", path).Output()
	case strings.HasSuffix(path, ".zst"):
		return exec.Command("zstd", "-dc", path).Output()
	}
	return os.ReadFile(path)
}
