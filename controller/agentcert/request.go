package agentcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	certclient "k8s.io/client-go/kubernetes/typed/certificates/v1"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

// RequestOptions say which node's certificate to get and where to keep it.
type RequestOptions struct {
	Node string
	// Dir receives node.pem, node-key.pem and ca.pem (the controller's
	// CA, the end of the issued chain).
	Dir string
	// Renew: a certificate with less than this left is asked for again
	// (7 days when 0); a longer-lived one is kept and nothing is asked.
	Renew time.Duration
	// Timeout bounds the wait for the controller to sign (2 minutes when
	// 0).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Current reports whether dir holds a certificate of node that is valid
// for at least renew more.
func Current(dir, node string, renew time.Duration) bool {
	certPEM, err := os.ReadFile(filepath.Join(dir, NodeCert))
	if err != nil {
		return false
	}
	for _, f := range []string{NodeKey, CACert} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	return err == nil && c.Subject.CommonName == "node:"+node && time.Until(c.NotAfter) > renew
}

// splitChain splits an issued chain into the leaf and the CA that signed
// it (the chain's last certificate).
func splitChain(chain []byte) (leaf, ca []byte, err error) {
	var blocks []*pem.Block
	for rest := chain; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) < 2 {
		return nil, nil, fmt.Errorf("the chain holds %d certificates, want the node's and the CA's", len(blocks))
	}
	return pem.EncodeToMemory(blocks[0]), pem.EncodeToMemory(blocks[len(blocks)-1]), nil
}

// Request gets node's agent certificate from the cluster: it makes a key,
// asks with a CertificateSigningRequest of signer skiff.io/agent, waits
// (watching the request) until the controller signs or denies it, and
// writes the key and certificate into Dir. A certificate still valid is
// kept (idempotent: a restarted agent asks nothing).
func Request(ctx context.Context, cs kubernetes.Interface, o RequestOptions) error {
	if o.Node == "" || o.Dir == "" {
		return errors.New("agentcert: the node and the directory are required")
	}
	if o.Renew == 0 {
		o.Renew = 7 * 24 * time.Hour
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if Current(o.Dir, o.Node, o.Renew) {
		log.Info("agent certificate is current", "node", o.Node, "dir", o.Dir)
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node:" + o.Node}}, key)
	if err != nil {
		return err
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	ttl := int32(MaxTTL / time.Second)
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "skiff-agent-" + o.Node + "-" + hex.EncodeToString(suffix),
			Labels: map[string]string{"app.kubernetes.io/part-of": "skiff"}},
		Spec: certv1.CertificateSigningRequestSpec{
			SignerName:        SignerName,
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			Usages:            []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
			ExpirationSeconds: &ttl,
		},
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	if _, err := csrs.Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("agentcert: asking for the certificate of node %s: %w", o.Node, err)
	}
	log.Info("agent certificate requested", "node", o.Node, "csr", csr.Name)
	certPEM, err := awaitCertificate(ctx, csrs, csr.Name, o, log)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteWith(o.Dir, NodeKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), keyFile); err != nil {
		return fmt.Errorf("agentcert: %w", err)
	}
	leaf, ca, err := splitChain(certPEM)
	if err != nil {
		return fmt.Errorf("agentcert: the certificate of %s: %w", csr.Name, err)
	}
	if err := atomicfile.WriteWith(o.Dir, CACert, ca, certFile); err != nil {
		return fmt.Errorf("agentcert: %w", err)
	}
	if err := atomicfile.WriteWith(o.Dir, NodeCert, leaf, certFile); err != nil {
		return fmt.Errorf("agentcert: %w", err)
	}
	log.Info("agent certificate written", "node", o.Node, "dir", o.Dir)
	return nil
}

// awaitCertificate waits until the request is signed (its certificate),
// denied or failed (an error with the reason), or ctx ends. It reads the
// request, then watches it from that read's version; a watch the API
// server ends (or ends with an error event, such as a version too old)
// is started again after a new read, so a closed watch is never taken
// for an answer. Only get and watch are needed (the agent's RBAC).
func awaitCertificate(ctx context.Context, csrs certclient.CertificateSigningRequestInterface, name string, o RequestOptions, log *slog.Logger) ([]byte, error) {
	timeout := func() error {
		return fmt.Errorf("agentcert: no certificate for node %s after %v (is the controller running? kubectl get csr %s): %w", o.Node, o.Timeout, name, ctx.Err())
	}
	// answer is the request's outcome: its certificate, or why not.
	answer := func(got *certv1.CertificateSigningRequest) ([]byte, error) {
		for _, c := range got.Status.Conditions {
			if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
				return nil, fmt.Errorf("agentcert: the certificate of node %s was %s: %s (%s)", o.Node, c.Type, c.Message, c.Reason)
			}
		}
		return got.Status.Certificate, nil
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, timeout()
			case <-time.After(200 * time.Millisecond):
			}
		}
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
			return nil, timeout()
		case err != nil:
			return nil, fmt.Errorf("agentcert: reading %s: %w", name, err)
		}
		if cert, err := answer(got); err != nil || len(cert) > 0 {
			return cert, err
		}
		w, err := csrs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: got.ResourceVersion})
		switch {
		case ctx.Err() != nil:
			return nil, timeout()
		case err != nil:
			return nil, fmt.Errorf("agentcert: watching %s: %w", name, err)
		}
		cert, err := watchAnswer(ctx, w, name, answer)
		w.Stop()
		if err != nil || len(cert) > 0 {
			return cert, err
		}
		if ctx.Err() != nil {
			return nil, timeout()
		}
		log.Info("agent certificate: the watch of the request ended; reading it again", "csr", name)
	}
}

// watchAnswer reads w until answer gives a certificate or an error, the
// request is deleted (an error), the watch ends (nil, nil) or ctx ends
// (nil, nil).
func watchAnswer(ctx context.Context, w watch.Interface, name string, answer func(*certv1.CertificateSigningRequest) ([]byte, error)) ([]byte, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return nil, nil
			}
			got, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			switch {
			case !isCSR:
				continue
			case ev.Type == watch.Deleted:
				return nil, fmt.Errorf("agentcert: %s was deleted before it was answered", name)
			}
			if cert, err := answer(got); err != nil || len(cert) > 0 {
				return cert, err
			}
		}
	}
}
