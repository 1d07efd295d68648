package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/deviceplugin/kubelettest"
)

// TestMalformedConfig: the plugin refuses a malformed configuration with
// an error naming the field and the reason, and advertises nothing: no
// registration, no socket, no device-info file.
func TestMalformedConfig(t *testing.T) {
	k := kubelettest.Start(t, "")
	dir := t.TempDir()
	conf := filepath.Join(dir, "dp.yaml")
	bad := `
pools:
  - resourceName: skiff.io/vf
    selectors: {pfNames: [ens1f0np0]}
  - resourceName: skiff.io/vf-b
    selectors: {vendors: ["0x15b3"]}
`
	if err := os.WriteFile(conf, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	devinfo := filepath.Join(dir, "devinfo")
	cmd := newCommand()
	cmd.SetArgs([]string{"--config", conf, "--sys-root", filepath.Join(dir, "sys"), "--plugin-dir", k.Dir, "--kubelet-socket", k.Socket,
		"--devinfo-dir", devinfo, "--link-watch=false"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `pools[1].selectors.vendors[0]: "0x15b3": want four lower-case hex digits`) || !strings.Contains(err.Error(), conf) {
		t.Fatalf("err = %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if regs := k.Registrations(); len(regs) != 0 {
		t.Errorf("registered %d pools from a refused configuration", len(regs))
	}
	ents, _ := os.ReadDir(k.Dir)
	for _, e := range ents {
		if e.Name() != "kubelet.sock" {
			t.Errorf("left %s in the plugin directory", e.Name())
		}
	}
	if _, err := os.Stat(devinfo); err == nil {
		t.Error("device-info directory made")
	}
}
