package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit/testca"
)

// pki is the cluster's certificate authority (valid for two days) and the
// files made from it in dir: name.pem and name-key.pem.
type pki struct {
	dir string
	ca  *testca.CA
}

func newPKI(dir string) (*pki, error) {
	ca, err := testca.New("skiff-test-cluster-ca", 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if _, err := ca.Write(dir); err != nil {
		return nil, err
	}
	if _, err := ca.WriteKey(dir); err != nil {
		return nil, err
	}
	return &pki{dir: dir, ca: ca}, nil
}

// path is the file of a certificate (name.pem) or key (name-key.pem).
func (p *pki) path(name string) string    { return testca.CertFile(p.dir, name) }
func (p *pki) keyPath(name string) string { return testca.KeyFile(p.dir, name) }

// issue writes a certificate and key signed by the CA: a client
// certificate for cn in orgs, or, with hosts, a server certificate for
// those names and addresses too.
func (p *pki) issue(name, cn string, orgs []string, hosts ...string) error {
	if _, _, err := p.ca.WriteCert(p.dir, name, testca.Cert{CN: cn, Orgs: orgs, Hosts: hosts}); err != nil {
		return fmt.Errorf("cluster: certificate %s: %w", name, err)
	}
	return nil
}

// serviceAccountKey writes the key pair that signs service account tokens.
func (p *pki) serviceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err := os.WriteFile(p.keyPath("sa"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.path("sa"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// kubeconfig writes a kubeconfig for the certificate name against server.
func (p *pki) kubeconfig(file, server, name string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: skiff-test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: skiff-test
  context: {cluster: skiff-test, user: %s}
current-context: skiff-test
`, server, p.path("ca"), name, p.path(name), p.keyPath(name), name)
	return os.WriteFile(file, []byte(cfg), 0o600)
}
