package agentcert

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Keys of a ServiceAccount user's extra information, filled by the API
// server from a pod-bound token.
const (
	extraNodeName = "authentication.kubernetes.io/node-name"
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
)

// MaxTTL bounds an agent certificate's lifetime (the agent asks again at
// its next start, and before expiry).
const MaxTTL = 30 * 24 * time.Hour

// Approver approves and signs the CertificateSigningRequests of signer
// skiff.io/agent that come from the agents' ServiceAccount, from a pod of
// it on the node the certificate names, and denies the others with the
// reason. Run it in one controller replica (the Kubernetes adapter's
// leader); signing the same request twice is harmless.
type Approver struct {
	Client kubernetes.Interface
	CA     *CA
	// Namespace and ServiceAccount of the agents (skiff-system,
	// skiff-agent).
	Namespace, ServiceAccount string
	Logger                    *slog.Logger
}

// Run handles requests until ctx ends.
func (a *Approver) Run(ctx context.Context) error {
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := informers.NewSharedInformerFactoryWithOptions(a.Client, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", SignerName).String()
	}))
	inf := f.Certificates().V1().CertificateSigningRequests()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { enqueue(q, o) },
		UpdateFunc: func(_, o any) { enqueue(q, o) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	for {
		name, quit := q.Get()
		if quit {
			return ctx.Err()
		}
		csr, err := inf.Lister().Get(name)
		if err == nil {
			err = a.handle(ctx, log, csr)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			log.Warn("agent certificate request; retrying", "csr", name, "err", err)
			q.AddRateLimited(name)
		} else {
			q.Forget(name)
		}
		q.Done(name)
	}
}

func enqueue(q workqueue.TypedRateLimitingInterface[string], o any) {
	if csr, ok := o.(*certv1.CertificateSigningRequest); ok {
		q.Add(csr.Name)
	}
}

func condition(csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool { return c.Type == t })
}

// handle approves or denies a pending request and signs an approved one.
func (a *Approver) handle(ctx context.Context, log *slog.Logger, csr *certv1.CertificateSigningRequest) error {
	if csr.Spec.SignerName != SignerName || len(csr.Status.Certificate) > 0 ||
		condition(csr, certv1.CertificateDenied) || condition(csr, certv1.CertificateFailed) {
		return nil
	}
	csrs := a.Client.CertificatesV1().CertificateSigningRequests()
	node, pub, why := a.check(ctx, csr)
	if !condition(csr, certv1.CertificateApproved) {
		c := csr.DeepCopy()
		cond := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "SkiffAgentOfThisNode", Message: "the agents' ServiceAccount, from a pod on node " + node, LastUpdateTime: metav1.Now()}
		if why != "" {
			cond = certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
				Reason: "SkiffRefused", Message: why, LastUpdateTime: metav1.Now()}
		}
		c.Status.Conditions = append(c.Status.Conditions, cond)
		updated, err := csrs.UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("agentcert: %s: %w", cond.Type, err)
		}
		if why != "" {
			log.Warn("agent certificate request denied", "csr", csr.Name, "requester", csr.Spec.Username, "reason", why)
			return nil
		}
		log.Info("agent certificate request approved", "csr", csr.Name, "node", node)
		csr = updated
	} else if why != "" {
		// Approved by someone else, but not something Skiff signs.
		log.Warn("approved agent certificate request not signed", "csr", csr.Name, "reason", why)
		return nil
	}
	ttl := MaxTTL
	if s := csr.Spec.ExpirationSeconds; s != nil && time.Duration(*s)*time.Second < ttl {
		ttl = time.Duration(*s) * time.Second
	}
	ca := a.CA
	certPEM, err := ca.issue(pub, "node:"+node, nil, ttl)
	if err != nil {
		return err
	}
	c := csr.DeepCopy()
	// The chain ends with the CA: the agent learns it from the API
	// server (which it already trusts) with its certificate, and needs no
	// other copy to check the controller's.
	c.Status.Certificate = append(certPEM, ca.PEM...)
	if _, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("agentcert: signing: %w", err)
	}
	log.Info("agent certificate issued", "csr", csr.Name, "node", node, "ttl", ttl)
	return nil
}

// check decides whether the request may be signed. It returns the node
// and the request's public key, or why not.
func (a *Approver) check(ctx context.Context, csr *certv1.CertificateSigningRequest) (node string, pub any, why string) {
	wantUser := "system:serviceaccount:" + a.Namespace + ":" + a.ServiceAccount
	if csr.Spec.Username != wantUser {
		return "", nil, fmt.Sprintf("requested by %q; only %s may ask for agent certificates", csr.Spec.Username, wantUser)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "", nil, "spec.request is not a PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", nil, "spec.request: " + err.Error()
	}
	if err := req.CheckSignature(); err != nil {
		return "", nil, "spec.request: bad signature: " + err.Error()
	}
	node, ok := strings.CutPrefix(req.Subject.CommonName, "node:")
	if !ok || node == "" {
		return "", nil, fmt.Sprintf("the common name %q is not node:NAME", req.Subject.CommonName)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 || len(req.Subject.Organization) > 0 {
		return node, nil, "an agent certificate carries its common name only (no names, addresses or organizations)"
	}
	for _, u := range csr.Spec.Usages {
		if u != certv1.UsageClientAuth && u != certv1.UsageDigitalSignature && u != certv1.UsageKeyEncipherment {
			return node, nil, fmt.Sprintf("usage %q: an agent certificate is for client auth only", u)
		}
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageClientAuth) {
		return node, nil, `usages: "client auth" is required`
	}
	// The requester's token is bound to a pod: which one, on which node.
	extra := func(k string) string {
		if v := csr.Spec.Extra[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	if n := extra(extraNodeName); n != "" && n != node {
		return node, nil, fmt.Sprintf("asked for node %q from a pod on node %q", node, n)
	}
	podName, podUID := extra(extraPodName), extra(extraPodUID)
	if podName == "" || podUID == "" {
		return node, nil, "the requester's token is not bound to a pod, so its node cannot be known"
	}
	pod, err := a.Client.CoreV1().Pods(a.Namespace).Get(ctx, podName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return node, nil, fmt.Sprintf("the requesting pod %s/%s does not exist", a.Namespace, podName)
	case err != nil:
		return node, nil, "the requesting pod could not be read: " + err.Error()
	case string(pod.UID) != podUID:
		return node, nil, fmt.Sprintf("the requesting pod %s/%s is not the one the token was made for", a.Namespace, podName)
	case pod.Spec.ServiceAccountName != a.ServiceAccount:
		return node, nil, fmt.Sprintf("the requesting pod runs as %q", pod.Spec.ServiceAccountName)
	case pod.Spec.NodeName != node:
		return node, nil, fmt.Sprintf("asked for node %q from pod %s/%s on node %q", node, a.Namespace, podName, pod.Spec.NodeName)
	}
	return node, req.PublicKey, ""
}

// PublishCA writes the CA certificate into the ConfigMap skiff-ca of
// namespace, which agents mount to check the controller's certificate.
func PublishCA(ctx context.Context, cs kubernetes.Interface, namespace string, ca *CA) error {
	cms := cs.CoreV1().ConfigMaps(namespace)
	want := map[string]string{CACert: string(ca.PEM)}
	cm, err := cms.Get(ctx, "skiff-ca", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "skiff-ca",
			Labels: map[string]string{"app.kubernetes.io/part-of": "skiff"}}, Data: want}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return PublishCA(ctx, cs, namespace, ca)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("agentcert: ConfigMap skiff-ca: %w", err)
	}
	if cm.Data[CACert] == want[CACert] {
		return nil
	}
	c := cm.DeepCopy()
	c.Data = want
	_, err = cms.Update(ctx, c, metav1.UpdateOptions{})
	return errors.Join(err)
}
