package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/containernetworking/cni/libcni"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

// InstallOptions say where a node's container runtime looks for CNI
// plugins and configurations, and what skiff-cni's configuration holds.
type InstallOptions struct {
	// Binary is the skiff-cni executable to install (this one when
	// empty).
	Binary string
	// BinDir and ConfDir are the runtime's CNI directories (on a
	// Kubernetes node, mounted from the host).
	BinDir, ConfDir string
	// File is the configuration list's file name in ConfDir; runtimes
	// take the first file in lexical order.
	File string
	// Name is the CNI network name of the configuration list.
	Name string
	// Network is the Skiff network pods attach to.
	Network string
	// Socket is the node agent's local API socket.
	Socket string
	// MTU, when not 0, overrides the network's MTU inside pods.
	MTU int
}

// ConfListVersion is the CNI version of the configuration lists Install
// writes.
const ConfListVersion = "1.0.0"

// objectName is what Skiff accepts as an object name.
var objectName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// Validate checks o and names the field that is wrong.
func (o InstallOptions) Validate() error {
	switch {
	case o.BinDir == "" || !filepath.IsAbs(o.BinDir):
		return fmt.Errorf("--cni-bin-dir %q: must be an absolute path", o.BinDir)
	case o.ConfDir == "" || !filepath.IsAbs(o.ConfDir):
		return fmt.Errorf("--cni-conf-dir %q: must be an absolute path", o.ConfDir)
	case o.File == "" || filepath.Base(o.File) != o.File || filepath.Ext(o.File) != ".conflist":
		return fmt.Errorf("--file %q: must be a file name ending in .conflist", o.File)
	case !objectName.MatchString(o.Name):
		return fmt.Errorf("--name %q: must be a name of [a-z0-9.-]", o.Name)
	case !objectName.MatchString(o.Network):
		return fmt.Errorf("--network %q: must be the name of a Skiff network ([a-z0-9.-])", o.Network)
	case o.Socket == "" || !filepath.IsAbs(o.Socket):
		return fmt.Errorf("--socket %q: must be an absolute path", o.Socket)
	case o.MTU != 0 && (o.MTU < 576 || o.MTU > 65535):
		return fmt.Errorf("--mtu %d: must be 0 (the network's) or 576..65535", o.MTU)
	}
	return nil
}

// ConfList is the configuration list Install writes.
func (o InstallOptions) ConfList() ([]byte, error) {
	plugin := map[string]any{"type": "skiff-cni", "network": o.Network, "socket": o.Socket}
	if o.MTU != 0 {
		plugin["mtu"] = o.MTU
	}
	// 1.0.0, not the plugin's newest: runtimes still in service read
	// results of the version they asked for, and containerd 1.6's CNI
	// library knows no 1.1.0 ("unsupported CNI result version").
	b, err := json.MarshalIndent(map[string]any{"cniVersion": ConfListVersion, "name": o.Name, "plugins": []any{plugin}}, "", "  ")
	if err != nil {
		return nil, err
	}
	// What the runtime will read must parse, through libcni as runtimes
	// do, and through the plugin's own checks.
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("cni install: the configuration list does not parse: %w", err)
	}
	if _, err := loadConf(l.Plugins[0].Bytes, true); err != nil {
		return nil, fmt.Errorf("cni install: %w", err)
	}
	return append(b, '\n'), nil
}

// writeFile is atomicfile.WriteWith; a test makes it fail.
var writeFile = atomicfile.WriteWith

// binName is the plugin binary's file name in BinDir.
const binName = "skiff-cni"

// How Install writes the binary and the configuration list: readable by
// all, the binary executable, a missing directory made.
var (
	binOpts  = atomicfile.Options{Perm: 0o755, DirPerm: 0o755}
	confOpts = atomicfile.Options{Perm: 0o644, DirPerm: 0o755}
)

// Install puts the plugin binary in BinDir and the configuration list in
// ConfDir, each by writing a temporary file in the same directory, syncing
// it and renaming it over the old one, so that a runtime never reads a
// half-written file. The binary goes first: a configuration never names a
// plugin that is not there. On error nothing new stays (a binary
// installed by this call is removed again, or the older one put back, if
// the configuration cannot be written), but for a configuration that got
// in place and only its directory could not be synced: the binary it
// names stays. Idempotent: files that already match are not written.
func Install(o InstallOptions) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("cni install: %w", err)
	}
	conf, err := o.ConfList()
	if err != nil {
		return err
	}
	src := o.Binary
	if src == "" {
		if src, err = os.Executable(); err != nil {
			return fmt.Errorf("cni install: %w", err)
		}
	}
	bin, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("cni install: reading the plugin: %w", err)
	}
	binPath, confPath := filepath.Join(o.BinDir, binName), filepath.Join(o.ConfDir, o.File)
	old, hadOld := readIfExists(binPath)
	oldConf, hadConf := readIfExists(confPath)
	if hadOld && hadConf && bytes.Equal(old, bin) && bytes.Equal(oldConf, conf) {
		return nil // in place already: nothing written
	}
	if err := writeFile(o.BinDir, binName, bin, binOpts); err != nil {
		return fmt.Errorf("cni install: %w", err)
	}
	if err := writeFile(o.ConfDir, o.File, conf, confOpts); err != nil {
		err = fmt.Errorf("cni install: %w", err)
		if cur, ok := readIfExists(confPath); ok && bytes.Equal(cur, conf) && !(hadConf && bytes.Equal(oldConf, conf)) {
			return err // put in place by this call: it names this binary
		}
		var undo error
		if hadOld {
			undo = writeFile(o.BinDir, binName, old, binOpts)
		} else {
			undo = os.Remove(binPath)
		}
		return errors.Join(err, undo)
	}
	return nil
}

func readIfExists(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	return b, err == nil
}

// installMain is `skiff-cni install [flags]`: what a node's setup (the
// agent DaemonSet's init container, a host's provisioning) runs.
func installMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("skiff-cni install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o InstallOptions
	fs.StringVar(&o.BinDir, "cni-bin-dir", "/opt/cni/bin", "the runtime's CNI plugin directory")
	fs.StringVar(&o.ConfDir, "cni-conf-dir", "/etc/cni/net.d", "the runtime's CNI configuration directory")
	fs.StringVar(&o.File, "file", "10-skiff.conflist", "file name of the configuration list")
	fs.StringVar(&o.Name, "name", "skiff", "CNI network name of the configuration list")
	fs.StringVar(&o.Network, "network", "", "the Skiff network pods attach to (required)")
	fs.StringVar(&o.Socket, "socket", "/run/skiff/agent.sock", "the node agent's local API socket")
	fs.IntVar(&o.MTU, "mtu", 0, "MTU inside pods (0: the network's)")
	fs.StringVar(&o.Binary, "binary", "", "the plugin to install (default: this executable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "skiff-cni install: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := Install(o); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stderr, "skiff-cni install: %s and %s installed (network %q)\n",
		filepath.Join(o.BinDir, binName), filepath.Join(o.ConfDir, o.File), o.Network)
	return 0
}
