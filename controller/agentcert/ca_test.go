package agentcert_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/skiff-sdn/skiff/controller/agentcert"
)

// A new CA and the serving certificate are written into a directory made
// the owner's only: the keys the owner's only, the certificates readable
// by all, nothing else left there; the CA is read back as it was made.
func TestCAFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "ca")
	ca, err := agentcert.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteServerCert(dir, []string{"skiff-controller.skiff-system.svc", "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{agentcert.CAKey: 0o600, agentcert.CACert: 0o644, agentcert.ServerKey: 0o600, agentcert.ServerCert: 0o644}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(want) {
		t.Errorf("%d files in the CA directory, want %d", len(es), len(want))
	}
	for _, e := range es {
		st, err := e.Info()
		if err != nil || st.Mode() != want[e.Name()] {
			t.Errorf("%s: mode %v (%v), want %v", e.Name(), st.Mode(), err, want[e.Name()])
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("CA directory: mode %v (%v), want the owner's only", st.Mode(), err)
	}
	again, err := agentcert.LoadOrCreateCA(dir)
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Errorf("the CA read back: %v, want the one made", err)
	}
}
