package testca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// TestCertificates: a server certificate serves its names and addresses
// and verifies as a client's too; one without hosts is a client's only;
// the files land where CertFile and KeyFile say.
func TestCertificates(t *testing.T) {
	ca, err := New("test", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := ca.Issue(Cert{CN: "apiserver", Orgs: []string{"o"}, Hosts: []string{"127.0.0.1", "kubernetes"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(cp)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject.CommonName != "apiserver" || !slices.Equal(c.Subject.Organization, []string{"o"}) ||
		!slices.Equal(c.DNSNames, []string{"kubernetes"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("certificate %v %v %v", c.Subject, c.DNSNames, c.IPAddresses)
	}
	if time.Until(c.NotAfter) < time.Hour {
		t.Fatalf("valid until %v", c.NotAfter)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "kubernetes", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}

	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteCert(dir, "admin", Cert{CN: "admin"})
	if err != nil || certFile != CertFile(dir, "admin") || keyFile != KeyFile(dir, "admin") {
		t.Fatalf("%s %s %v", certFile, keyFile, err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a certificate without hosts verifies as a server's")
	}
	caFile, err := ca.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := ca.WriteKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(caFile, caKey); err != nil {
		t.Fatalf("the CA's files: %v", err)
	}
	if st, err := os.Stat(caKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key file: %v %v", st.Mode(), err)
	}
}
