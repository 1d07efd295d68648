package testkit

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit/testca"
)

// CA is a test certificate authority (testca.CA, valid for an hour) with
// helpers that fail the test rather than return errors.
type CA struct{ *testca.CA }

// NewCA makes a CA named skiff-test-ca, valid for an hour.
func NewCA(t testing.TB) CA {
	t.Helper()
	ca, err := testca.New("skiff-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return CA{ca}
}

// Loopback returns a PEM certificate and key for common name cn, valid
// for 127.0.0.1 as a server and as a client.
func (ca CA) Loopback(t testing.TB, cn string) (cert, key []byte) {
	t.Helper()
	cert, key, err := ca.Issue(testca.Cert{CN: cn, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// LoopbackFiles writes Loopback's certificate and key into a new
// t.TempDir() and returns their paths.
func (ca CA) LoopbackFiles(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	c, k := ca.Loopback(t, cn)
	return WriteFile(t, cn+".crt", c), WriteFile(t, cn+".key", k)
}

// File writes the CA's certificate into a new t.TempDir() and returns its
// path.
func (ca CA) File(t testing.TB) string {
	t.Helper()
	return WriteFile(t, "ca.crt", ca.PEM)
}

// WriteFile writes b as name in a new t.TempDir() (mode 0600) and returns
// the path.
func WriteFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
