package agentcert_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skiff-sdn/skiff/controller/agentcert"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

const ns = "skiff-system"

// token returns a token of ServiceAccount sa, bound to pod when pod is
// not nil (as a pod's projected token is).
func token(t *testing.T, cs kubernetes.Interface, sa string, pod *corev1.Pod) string {
	t.Helper()
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc.cluster.local"}}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", sa, err)
	}
	return tr.Status.Token
}

func as(t *testing.T, c *cluster.Cluster, tok string) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(c.TokenConfig(tok))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func pod(t *testing.T, cs kubernetes.Interface, name, sa, node string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "skiff.local/skiff:dev"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentCertificates runs the agents' certificate flow against a real
// API server, with the ServiceAccounts and RBAC of deploy/kubernetes: an
// agent's pod gets a certificate for its own node and for no other; a
// token not bound to a pod, or of another account, gets none; a current
// certificate is kept without asking again; the CA is published.
func TestAgentCertificates(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ControlPlaneOnly: true})
	admin := c.Client(t)
	c.MustKubectl(t, "create", "namespace", ns)
	rbac, err := filepath.Abs("../../deploy/kubernetes/base/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.MustKubectl(t, "-n", ns, "apply", "-f", rbac)
	c.MustKubectl(t, "-n", ns, "create", "serviceaccount", "other")

	dir := t.TempDir()
	ca, err := agentcert.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	// The controller's side runs with the controller's ServiceAccount.
	ctrl := as(t, c, token(t, admin, "skiff-controller", nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- (&agentcert.Approver{Client: ctrl, CA: ca, Namespace: ns, ServiceAccount: "skiff-agent"}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	if err := agentcert.PublishCA(t.Context(), ctrl, ns, ca); err != nil {
		t.Fatal(err)
	}
	if got := c.MustKubectl(t, "-n", ns, "get", "configmap", "skiff-ca", "-o", "jsonpath={.data.ca\\.pem}"); got != string(ca.PEM) {
		t.Errorf("ConfigMap skiff-ca holds %q", got)
	}

	agentPod := pod(t, admin, "agent-k1", "skiff-agent", "k1")
	agent := as(t, c, token(t, admin, "skiff-agent", agentPod))
	k1 := filepath.Join(dir, "k1")
	start := time.Now()
	if err := agentcert.Request(t.Context(), agent, agentcert.RequestOptions{Node: "k1", Dir: k1, Timeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Logf("certificate of k1 issued in %v", time.Since(start))
	certPEM, _ := os.ReadFile(filepath.Join(k1, agentcert.NodeCert))
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the node certificate does not verify against the CA: %v", err)
	}
	if cert.Subject.CommonName != "node:k1" || len(cert.DNSNames)+len(cert.IPAddresses) != 0 || time.Until(cert.NotAfter) > agentcert.MaxTTL {
		t.Errorf("certificate %v %v %v until %v", cert.Subject, cert.DNSNames, cert.IPAddresses, cert.NotAfter)
	}
	if got, _ := os.ReadFile(filepath.Join(k1, agentcert.CACert)); string(got) != string(ca.PEM) {
		t.Errorf("ca.pem is not the controller's CA:\n%s", got)
	}
	if st, _ := os.Stat(filepath.Join(k1, agentcert.NodeKey)); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", st.Mode())
	}
	// Asked again: kept, no new request.
	before := c.MustKubectl(t, "get", "csr", "-o", "name")
	if err := agentcert.Request(t.Context(), agent, agentcert.RequestOptions{Node: "k1", Dir: k1}); err != nil {
		t.Fatal(err)
	}
	if after := c.MustKubectl(t, "get", "csr", "-o", "name"); after != before {
		t.Errorf("a current certificate was asked for again:\n%s\n%s", before, after)
	}

	// Refusals, each with its reason, and nothing written.
	for _, bad := range []struct {
		name string
		cs   kubernetes.Interface
		node string
		want string
	}{
		{"another node's certificate from k1's agent pod", agent, "k2", `asked for node "k2"`},
		{"a token bound to no pod", as(t, c, token(t, admin, "skiff-agent", nil)), "k1", "not bound to a pod"},
		{"another ServiceAccount", as(t, c, token(t, admin, "other", pod(t, admin, "other-k1", "other", "k1"))), "k1", "forbidden"},
	} {
		d := filepath.Join(dir, strings.ReplaceAll(bad.name, " ", "-"))
		err := agentcert.Request(t.Context(), bad.cs, agentcert.RequestOptions{Node: bad.node, Dir: d, Timeout: 30 * time.Second})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v; want an error with %q", bad.name, err, bad.want)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s: %s was written", bad.name, d)
		}
	}
	// The agent pod is gone: its token no longer gets certificates.
	if err := admin.CoreV1().Pods(ns).Delete(t.Context(), agentPod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := agentcert.Request(t.Context(), agent, agentcert.RequestOptions{Node: "k1", Dir: filepath.Join(dir, "gone"), Timeout: 20 * time.Second}); err == nil {
		t.Error("a deleted pod's token got a certificate")
	}
}
