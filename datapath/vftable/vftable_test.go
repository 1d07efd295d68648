package vftable

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, err string }{
		{`{"vfs": [{"pf": "p", "index": 0, "pci": "0000:03:00.2", "netdev": "vf0"}, {"pf": "p", "index": 1, "netdev": "vf1", "wire": "w1"}]}`, ""},
		{`{"vfs": [{"pf": "p", "index": 0, "netdev": "x", "wire": "x"}]}`, "wire: x is the VF's netdev too"},
		{`{"vfs": [{"pf": "p", "index": 0}]}`, "pf and netdev are required"},
		{`{"vfs": [{"pf": "p", "index": -1, "netdev": "x"}]}`, "index: -1 is negative"},
		{`{"vfs": [{"pf": "p", "index": 0, "netdev": "x"}, {"pf": "p", "index": 0, "netdev": "y"}]}`, "VF 0 of p is listed twice"},
		{`{"vfs": [`, "unexpected end"},
	} {
		path := filepath.Join(dir, "t.json")
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		tab, err := Load(path)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: got %v, want %q", c.body, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if pf, i, err := tab.ByPCI(ctx, "0000:03:00.2"); err != nil || pf != "p" || i != 0 {
			t.Errorf("ByPCI: %s %d %v", pf, i, err)
		}
		if n, err := tab.Netdev(ctx, "p", 1); err != nil || n != "vf1" {
			t.Errorf("Netdev: %s %v", n, err)
		}
		if w, w0 := tab.Wire("p", 1), tab.Wire("p", 0); w != "w1" || w0 != "" {
			t.Errorf("Wire: %q %q, want w1 and none", w, w0)
		}
		if _, err := tab.Netdev(ctx, "p", 7); err == nil || !strings.Contains(err.Error(), "no VF 7 of PF p") {
			t.Errorf("Netdev of an unknown VF: %v", err)
		}
	}
}
