package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

func installOpts(t *testing.T) InstallOptions {
	dir := t.TempDir()
	bin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return InstallOptions{Binary: bin, BinDir: filepath.Join(dir, "opt/cni/bin"), ConfDir: filepath.Join(dir, "etc/cni/net.d"),
		File: "10-skiff.conflist", Name: "skiff", Network: "pods", Socket: "/run/skiff/agent.sock"}
}

func TestInstall(t *testing.T) {
	o := installOpts(t)
	o.MTU = 1400
	for range 2 { // idempotent
		if err := Install(o); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(o.BinDir, "skiff-cni"))
	if err != nil || string(b) != "#!/bin/sh\necho v2\n" {
		t.Fatalf("binary: %q %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(o.BinDir, "skiff-cni")); st.Mode().Perm() != 0o755 {
		t.Errorf("binary mode %v", st.Mode())
	}
	conf, err := os.ReadFile(filepath.Join(o.ConfDir, o.File))
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &l); err != nil {
		t.Fatal(err)
	}
	if l.CNIVersion != "1.0.0" || l.Name != "skiff" || len(l.Plugins) != 1 || l.Plugins[0]["type"] != "skiff-cni" ||
		l.Plugins[0]["network"] != "pods" || l.Plugins[0]["socket"] != "/run/skiff/agent.sock" || l.Plugins[0]["mtu"] != 1400.0 {
		t.Errorf("conflist %s", conf)
	}
	// Installed again: nothing is written (same modification times).
	st1, _ := os.Stat(filepath.Join(o.ConfDir, o.File))
	if err := Install(o); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(filepath.Join(o.ConfDir, o.File)); !st2.ModTime().Equal(st1.ModTime()) {
		t.Error("an install that matched wrote the configuration again")
	}
	// No temporary file is left in either directory.
	for _, d := range []string{o.BinDir, o.ConfDir} {
		ents, _ := os.ReadDir(d)
		if len(ents) != 1 {
			t.Errorf("%s holds %d files, want 1", d, len(ents))
		}
	}
}

// TestInstallRefusesBadInput: each bad field is named, and nothing is
// written.
func TestInstallRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*InstallOptions)
	}{
		{"--network", func(o *InstallOptions) { o.Network = "" }},
		{"--network", func(o *InstallOptions) { o.Network = "Pods_1" }},
		{"--socket", func(o *InstallOptions) { o.Socket = "agent.sock" }},
		{"--cni-bin-dir", func(o *InstallOptions) { o.BinDir = "opt/cni/bin" }},
		{"--cni-conf-dir", func(o *InstallOptions) { o.ConfDir = "" }},
		{"--file", func(o *InstallOptions) { o.File = "../10-skiff.conflist" }},
		{"--file", func(o *InstallOptions) { o.File = "10-skiff.conf" }},
		{"--mtu", func(o *InstallOptions) { o.MTU = 100 }},
		{"--name", func(o *InstallOptions) { o.Name = "" }},
	} {
		o := installOpts(t)
		c.edit(&o)
		err := Install(o)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v", c.field, err)
		}
		for _, d := range []string{o.BinDir, o.ConfDir} {
			if ents, _ := os.ReadDir(d); d != "" && len(ents) != 0 {
				t.Errorf("%s: %s holds %d files after a refused install", c.field, d, len(ents))
			}
		}
	}
}

// TestInstallConfFailureLeavesNothing: when the configuration cannot be
// written, a binary this install put there is removed, and an older one
// is put back.
func TestInstallConfFailureLeavesNothing(t *testing.T) {
	o := installOpts(t)
	if err := os.MkdirAll(filepath.Dir(o.ConfDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.ConfDir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Install(o); err == nil {
		t.Fatal("installed into a conf dir that is a file")
	}
	if _, err := os.Stat(filepath.Join(o.BinDir, "skiff-cni")); !os.IsNotExist(err) {
		t.Errorf("the binary stayed after the configuration failed: %v", err)
	}
	if ents, _ := os.ReadDir(o.BinDir); len(ents) != 0 {
		t.Errorf("bin dir holds %d files", len(ents))
	}
	// An older binary is put back.
	if err := os.WriteFile(filepath.Join(o.BinDir, "skiff-cni"), []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install(o); err == nil {
		t.Fatal("installed into a conf dir that is a file")
	}
	if b, _ := os.ReadFile(filepath.Join(o.BinDir, "skiff-cni")); string(b) != "v1" {
		t.Errorf("the older binary was not put back: %q", b)
	}
}

// TestInstallConfSyncFailureKeepsBinary: a configuration that got in
// place and only its directory could not be synced keeps the binary it
// names, a new one or one this install replaced; the error is returned.
func TestInstallConfSyncFailureKeepsBinary(t *testing.T) {
	syncFailed := errors.New("sync directory: input/output error")
	writeFile = func(dir, name string, b []byte, o atomicfile.Options) error {
		if err := atomicfile.WriteWith(dir, name, b, o); err != nil || filepath.Ext(name) != ".conflist" {
			return err
		}
		return syncFailed
	}
	t.Cleanup(func() { writeFile = atomicfile.WriteWith })
	o := installOpts(t)
	want, err := os.ReadFile(o.Binary)
	if err != nil {
		t.Fatal(err)
	}
	for _, older := range []string{"", "v1"} {
		if older != "" {
			if err := os.WriteFile(filepath.Join(o.BinDir, "skiff-cni"), []byte(older), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(o.ConfDir, o.File)); err != nil {
				t.Fatal(err)
			}
		}
		if err := Install(o); !errors.Is(err, syncFailed) {
			t.Fatalf("older binary %q: %v, want %v", older, err, syncFailed)
		}
		if _, err := os.Stat(filepath.Join(o.ConfDir, o.File)); err != nil {
			t.Fatalf("older binary %q: the configuration: %v", older, err)
		}
		if b, _ := os.ReadFile(filepath.Join(o.BinDir, "skiff-cni")); !bytes.Equal(b, want) {
			t.Errorf("older binary %q: the binary is %q, want the one the configuration was written for", older, b)
		}
	}
}

func TestInstallMain(t *testing.T) {
	o := installOpts(t)
	var stderr bytes.Buffer
	if rc := installMain([]string{"--binary", o.Binary, "--cni-bin-dir", o.BinDir, "--cni-conf-dir", o.ConfDir, "--network", "pods"}, &stderr); rc != 0 {
		t.Fatalf("rc %d: %s", rc, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(o.ConfDir, "10-skiff.conflist")); err != nil {
		t.Error(err)
	}
	stderr.Reset()
	if rc := installMain([]string{"--cni-bin-dir", o.BinDir}, &stderr); rc != 1 || !strings.Contains(stderr.String(), "--network") {
		t.Errorf("without --network: rc %d, %q", rc, stderr.String())
	}
}
