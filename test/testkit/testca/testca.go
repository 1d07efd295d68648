// Package testca is a throwaway certificate authority for tests and for
// the test harnesses that start real binaries with mTLS (the scale
// harness, the Kubernetes test cluster). It does not import testing, so
// harness binaries may use it; tests use it through testkit.NewCA.
//
//	ca, err := testca.New("skiff-scale-ca", 24*time.Hour)
//	certPEM, keyPEM, err := ca.Issue(testca.Cert{CN: "controller", Hosts: []string{"127.0.0.1"}})
//	pair, err := ca.KeyPair(testca.Cert{CN: "node:n1"}) // a tls.Certificate (a client's)
//	caFile, err := ca.Write(dir)                       // dir/ca.pem
//	caKeyFile, err := ca.WriteKey(dir)                 // dir/ca-key.pem, for a signer
//	certFile, keyFile, err := ca.WriteCert(dir, "admin", testca.Cert{CN: "admin", Orgs: []string{"system:masters"}})
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose certificates are valid from an
// hour before it was made until its expiry.
type CA struct {
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
	notBefore time.Time
	notAfter  time.Time
	// PEM is the CA's certificate.
	PEM []byte
}

// Cert describes a certificate to issue. Every certificate is good for
// client authentication; one with Hosts is a server certificate for those
// names and addresses too.
type Cert struct {
	CN    string   // the subject's common name
	Orgs  []string // the subject's organizations (Kubernetes groups)
	Hosts []string // IP addresses and DNS names the certificate serves
}

// New makes a CA named name (its common name) whose certificates are
// valid for valid from now.
func New(name string, valid time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testca: key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(valid),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testca: %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testca: %s: %w", name, err)
	}
	return &CA{cert: cert, key: key, notBefore: tmpl.NotBefore, notAfter: tmpl.NotAfter,
		PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool is a certificate pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issue returns a PEM certificate for c signed by the CA and its PEM
// (EC) key.
func (ca *CA) Issue(c Cert) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("testca: key for %s: %w", c.CN, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("testca: serial for %s: %w", c.CN, err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: c.CN, Organization: c.Orgs},
		NotBefore: ca.notBefore, NotAfter: ca.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(c.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range c.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("testca: certificate for %s: %w", c.CN, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("testca: key for %s: %w", c.CN, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// KeyPair issues a certificate for c as a tls.Certificate.
func (ca *CA) KeyPair(c Cert) (tls.Certificate, error) {
	cp, kp, err := ca.Issue(c)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("testca: key pair for %s: %w", c.CN, err)
	}
	return pair, nil
}

// Write writes the CA's certificate into dir as ca.pem and returns its
// path.
func (ca *CA) Write(dir string) (certFile string, err error) {
	return writeFile(dir, CertFile(dir, "ca"), ca.PEM, 0o644)
}

// WriteKey writes the CA's key into dir as ca-key.pem, for a harness
// that signs with the CA (kube-controller-manager), and returns its path.
func (ca *CA) WriteKey(dir string) (keyFile string, err error) {
	kb, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return "", fmt.Errorf("testca: CA key: %w", err)
	}
	return writeFile(dir, KeyFile(dir, "ca"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// WriteCert issues a certificate for c and writes it and its key into
// dir as name.pem and name-key.pem; it returns their paths.
func (ca *CA) WriteCert(dir, name string, c Cert) (certFile, keyFile string, err error) {
	cp, kp, err := ca.Issue(c)
	if err != nil {
		return "", "", err
	}
	return writePair(dir, name, cp, kp)
}

// CertFile is where Write and WriteCert put the certificate called name
// in dir.
func CertFile(dir, name string) string { return filepath.Join(dir, name+".pem") }

// KeyFile is where WriteKey and WriteCert put the key called name in dir.
func KeyFile(dir, name string) string { return filepath.Join(dir, name+"-key.pem") }

// writePair writes a certificate (readable by all) and its key (by the
// owner only) into dir as name.pem and name-key.pem.
func writePair(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	if certFile, err = writeFile(dir, CertFile(dir, name), certPEM, 0o644); err != nil {
		return "", "", err
	}
	if keyFile, err = writeFile(dir, KeyFile(dir, name), keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeFile writes b to file, in dir (made if missing), with mode.
func writeFile(dir, file string, b []byte, mode os.FileMode) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("testca: %w", err)
	}
	if err := os.WriteFile(file, b, mode); err != nil {
		return "", fmt.Errorf("testca: %w", err)
	}
	return file, nil
}
