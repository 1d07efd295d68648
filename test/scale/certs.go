package scale

import (
	"crypto/tls"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/skiff-sdn/skiff/test/testkit/testca"
)

// CA issues the certificates of a run: the controllers' server
// certificate, the operator's client certificate, and one client
// certificate per node (common name node:NAME), as a real deployment has.
type CA struct{ ca *testca.CA }

// NewCA returns a CA valid for a day.
func NewCA() (*CA, error) {
	ca, err := testca.New("skiff-scale-ca", 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return &CA{ca: ca}, nil
}

// cert is a certificate for cn, valid for the loopback addresses the
// replicas listen on.
func cert(cn string) testca.Cert {
	return testca.Cert{CN: cn, Hosts: []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}}
}

// Client returns transport credentials presenting a certificate for cn.
func (ca *CA) Client(cn string) (credentials.TransportCredentials, error) {
	c, err := ca.ca.KeyPair(cert(cn))
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{c}, RootCAs: ca.ca.Pool(), MinVersion: tls.VersionTLS13}), nil
}

// Files writes the CA certificate and a certificate and key for cn into
// dir (ca.pem, CN.pem, CN-key.pem), as flags of the real binaries take
// them.
func (ca *CA) Files(dir, cn string) (caFile, certFile, keyFile string, err error) {
	if caFile, err = ca.ca.Write(dir); err != nil {
		return "", "", "", err
	}
	if certFile, keyFile, err = ca.ca.WriteCert(dir, cn, cert(cn)); err != nil {
		return "", "", "", err
	}
	return caFile, certFile, keyFile, nil
}
