// Package tlsconf builds the TLS settings of Skiff's gRPC links from the
// file paths given on command lines: TLS 1.3, mTLS when a CA for clients is
// given. Errors name the flag.
//
//	creds, err := tlsconf.Client(caPath, certPath, keyPath) // plaintext when all are ""
//	tc, err := tlsconf.Server(certPath, keyPath, clientCAPath)
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Pool reads the PEM certificates of path; flag names it in errors.
func Pool(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate found", flag, path)
	}
	return pool, nil
}

// Client returns the transport credentials of a client: the server is
// verified against ca (the system roots when empty), and cert/key are
// presented when given. All three empty means plaintext.
func Client(ca, cert, key string) (credentials.TransportCredentials, error) {
	if ca == "" && cert == "" && key == "" {
		return insecure.NewCredentials(), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13}
	if ca != "" {
		pool, err := Pool("--tls-ca", ca)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if cert != "" || key != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return credentials.NewTLS(tc), nil
}

// Server returns a server's TLS settings; with clientCA, every client must
// present a certificate it signed.
func Server(cert, key, clientCA string) (*tls.Config, error) {
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS13}
	if clientCA != "" {
		pool, err := Pool("--tls-client-ca", clientCA)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
