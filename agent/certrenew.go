package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// renewBefore: a certificate with less than this left is renewed.
const renewBefore = 10 * 24 * time.Hour

// renewCertificate renews the node's client certificate through the
// controller (RenewCertificate, proven by the current certificate) when
// it has less than renewBefore left, checking after every connection and
// every few hours; the files are replaced atomically, key first, and the
// next connection uses them (tlsconf.ClientReloading).
func (a *Agent) renewCertificate(ctx context.Context) {
	t := time.NewTicker(4 * time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.certSig:
		case <-t.C:
		}
		if err := a.renewOnce(ctx); err != nil {
			a.log.Warn("node certificate not renewed; retrying later", "err", err)
		}
	}
}

func (a *Agent) renewOnce(ctx context.Context) error {
	b, err := os.ReadFile(a.cfg.TLSCert)
	if err != nil {
		return err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return fmt.Errorf("%s: not PEM", a.cfg.TLSCert)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return err
	}
	if time.Until(cert.NotAfter) > renewBefore {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node:" + a.cfg.Node}}, key)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := a.client.RenewCertificate(rctx, &skiffv1.RenewCertificateRequest{Node: a.cfg.Node,
		Csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	cancel()
	if status.Code(err) == codes.FailedPrecondition {
		a.log.Info("the controller renews no certificates; this one expires", "notAfter", cert.NotAfter)
		return nil
	}
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	// Mode 0600 both (atomicfile.Write), the key first.
	if err := atomicfile.Write(filepath.Dir(a.cfg.TLSKey), filepath.Base(a.cfg.TLSKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Dir(a.cfg.TLSCert), filepath.Base(a.cfg.TLSCert), resp.GetCertificate()); err != nil {
		return err
	}
	a.log.Info("node certificate renewed", "was", cert.NotAfter)
	return nil
}
