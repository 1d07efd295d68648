// Package agentcert gives agents on Kubernetes nodes their mTLS identity
// without a shared secret on the nodes. The controller keeps a CA in its
// data directory and serves with a certificate of that CA; an agent's pod
// asks, with its ServiceAccount, for a certificate through a
// CertificateSigningRequest of signer skiff.io/agent naming its node
// (common name node:NAME); the controller approves and signs it only when
// the request comes from the agents' ServiceAccount, from a pod of that
// account running on that very node (the pod-bound token says which pod
// and node). A node's agent therefore holds a certificate for its own node
// only, and the controller already refuses a node certificate acting for
// another node.
//
//	ca, err := agentcert.LoadOrCreateCA("/var/lib/skiff/ca")          // controller
//	err = ca.WriteServerCert("/var/lib/skiff/ca", []string{"skiff-controller.skiff-system.svc", podIP})
//	go (&agentcert.Approver{Client: cs, CA: ca, Namespace: "skiff-system", ServiceAccount: "skiff-agent"}).Run(ctx)
//	err = agentcert.PublishCA(ctx, cs, "skiff-system", ca)           // ConfigMap skiff-ca for the agents
//
//	err := agentcert.Request(ctx, cs, agentcert.RequestOptions{Node: node, Dir: dir}) // agent's init step
package agentcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

// SignerName is the signer of agent certificates.
const SignerName = "skiff.io/agent"

// Files in a CA directory and an agent's certificate directory.
const (
	CACert     = "ca.pem"
	CAKey      = "ca-key.pem"
	ServerCert = "server.pem"
	ServerKey  = "server-key.pem"
	NodeCert   = "node.pem"
	NodeKey    = "node-key.pem"
)

// How the files are written: keys the owner's only, certificates
// readable by all, in a directory made the owner's only when missing.
var (
	keyFile  = atomicfile.Options{Perm: 0o600, DirPerm: 0o700}
	certFile = atomicfile.Options{Perm: 0o644, DirPerm: 0o700}
)

// CA is the controller's certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  crypto.Signer
}

// LoadOrCreateCA reads the CA in dir, or makes one (10 years) when dir has
// none. A CA whose files do not parse is an error, never replaced.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPEM, cerr := os.ReadFile(filepath.Join(dir, CACert))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, CAKey))
	switch {
	case cerr == nil && kerr == nil:
		return parseCA(certPEM, keyPEM)
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("agentcert: CA in %s: %w", dir, errors.Join(cerr, kerr))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "skiff-ca", Organization: []string{"skiff"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	// The key first: a directory with a certificate and no key is an
	// error at the next start, a key alone is replaced.
	if err := atomicfile.WriteWith(dir, CAKey, keyPEM, keyFile); err != nil {
		return nil, fmt.Errorf("agentcert: %w", err)
	}
	if err := atomicfile.WriteWith(dir, CACert, certPEM, certFile); err != nil {
		return nil, fmt.Errorf("agentcert: %w", err)
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("agentcert: the CA's certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("agentcert: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("agentcert: CA key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("agentcert: the CA's certificate is not a CA, or not the key's")
	}
	return &CA{Cert: cert, PEM: certPEM, key: key}, nil
}

func randSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

// issue signs a certificate for pub: a client certificate for cn, and a
// server one for names too when names is not empty.
func (ca *CA) issue(pub crypto.PublicKey, cn string, names []string, ttl time.Duration) ([]byte, error) {
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(ttl),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(names) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("agentcert: signing for %s: %w", cn, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// WriteServerCert writes the controller's serving certificate (one year,
// for names: DNS names and addresses) and its key into dir, made anew at
// every start so that the names follow the pod's address.
func (ca *CA) WriteServerCert(dir string, names []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	certPEM, err := ca.issue(&key.PublicKey, "skiff-controller", names, 365*24*time.Hour)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteWith(dir, ServerKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), keyFile); err != nil {
		return fmt.Errorf("agentcert: %w", err)
	}
	if err := atomicfile.WriteWith(dir, ServerCert, certPEM, certFile); err != nil {
		return fmt.Errorf("agentcert: %w", err)
	}
	return nil
}

// SignNodeRequest signs a PEM certificate request for node's client
// certificate (MaxTTL): its common name must be node:NAME and it may carry
// no other names. The caller has already proven it speaks for node.
func (ca *CA) SignNodeRequest(node string, csrPEM []byte) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("csr: not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr: bad signature: %w", err)
	}
	if req.Subject.CommonName != "node:"+node {
		return nil, fmt.Errorf("csr: common name %q, want %q", req.Subject.CommonName, "node:"+node)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 || len(req.Subject.Organization) > 0 {
		return nil, errors.New("csr: an agent certificate carries its common name only")
	}
	return ca.issue(req.PublicKey, "node:"+node, nil, MaxTTL)
}
