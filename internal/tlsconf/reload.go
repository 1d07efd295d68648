package tlsconf

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// ClientOptions are a client's TLS files and the name it expects the
// server to have.
type ClientOptions struct {
	CA, Cert, Key string
	// ServerName, when set, is checked against the server's certificate
	// instead of the dialled host (a Service name dialled by address).
	ServerName string
}

// ClientReloading is Client whose certificate and key are read again
// whenever their files change (a certificate renewed on disk is used for
// the next connection, without a restart). The files must exist at start.
func ClientReloading(o ClientOptions) (credentials.TransportCredentials, error) {
	if o.Cert == "" && o.Key == "" {
		if o.CA == "" && o.ServerName == "" {
			return Client("", "", "")
		}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: o.ServerName}
	if o.CA != "" {
		pool, err := Pool("--tls-ca", o.CA)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if o.Cert != "" || o.Key != "" {
		r := &keyPair{cert: o.Cert, key: o.Key}
		if _, err := r.get(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.get() }
	}
	return credentials.NewTLS(tc), nil
}

// keyPair is a certificate and key read from files, again when either
// file's modification time changes.
type keyPair struct {
	cert, key string

	mu    sync.Mutex
	mtime [2]time.Time
	pair  *tls.Certificate
}

func (k *keyPair) get() (*tls.Certificate, error) {
	cs, err := os.Stat(k.cert)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	ks, err := os.Stat(k.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := [2]time.Time{cs.ModTime(), ks.ModTime()}
	if k.pair != nil && now == k.mtime {
		return k.pair, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.pair != nil {
			return k.pair, nil // mid-renewal: the old pair until both files are new
		}
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	k.pair, k.mtime = &c, now
	return k.pair, nil
}
