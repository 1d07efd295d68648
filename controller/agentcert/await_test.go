package agentcert

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestAwaitSurvivesEndedWatches: watches the API server ends, with or
// without an error event, are started again after a new read, and the
// answer that comes on a later watch is the one returned (a closed watch
// was once taken for a failure: "the watch of ... ended").
func TestAwaitSurvivesEndedWatches(t *testing.T) {
	csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "skiff-agent-k1-00", ResourceVersion: "5"}}
	cs := fake.NewClientset(csr)
	var watches atomic.Int32
	cs.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(1, false)
		switch watches.Add(1) {
		case 1: // ended at once
			w.Stop()
		case 2: // an error event, then ended
			w.Error(&metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
			w.Stop()
		default: // the answer
			denied := csr.DeepCopy()
			denied.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
				Reason: "NotThisNode", Message: `asked for node "k2"`}}
			w.Modify(denied)
		}
		return true, w, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := awaitCertificate(ctx, cs.CertificatesV1().CertificateSigningRequests(), csr.Name, RequestOptions{Node: "k1", Timeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `was Denied: asked for node "k2"`) {
		t.Fatalf("err %v, want the denial that came on the third watch", err)
	}
	if n := watches.Load(); n != 3 {
		t.Errorf("%d watches, want 3", n)
	}

	// Signed while no watch was open: the read before the next watch
	// finds the certificate.
	signed := csr.DeepCopy()
	signed.Name, signed.Status.Certificate = "skiff-agent-k1-01", []byte("PEM")
	cs2 := fake.NewClientset(signed)
	cs2.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		t.Error("watched a request that was already answered")
		return true, watch.NewFake(), nil
	})
	cert, err := awaitCertificate(ctx, cs2.CertificatesV1().CertificateSigningRequests(), signed.Name, RequestOptions{Node: "k1", Timeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil || string(cert) != "PEM" {
		t.Fatalf("cert %q, err %v", cert, err)
	}
}
