package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Namespaces: their labels go to SetNamespace (what namespaceSelector
// matches). NetworkPolicies: each is applied as Skiff compiles it; one
// Skiff refuses gets a Warning Event naming the field and the reason, and
// the version Skiff enforces stays as it was (an apply is all or
// nothing). In a cluster with the adapter, the API is the truth: a policy
// Skiff holds that the API does not is deleted.

// Event reasons.
const (
	ReasonPolicyRefused    = "PolicyRefused"
	ReasonUnderlayMismatch = "UnderlayMismatch"
)

func labelsChanged(old, new any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := new.(metav1.Object)
	return !ok1 || !ok2 || !maps.Equal(o.GetLabels(), n.GetLabels())
}

func (t *term) syncNamespace(ctx context.Context, key string) error {
	ns, err := t.nss.Get(key)
	switch {
	case err == nil:
		if _, err := t.mgmt.SetNamespace(ctx, &skiffv1.Namespace{Name: ns.Name, Labels: ns.Labels}); err != nil {
			if status.Code(err) == codes.InvalidArgument {
				t.log.Warn("namespace refused", "namespace", key, "err", err)
				return nil
			}
			return fmt.Errorf("set namespace %s: %w", key, err)
		}
		return nil
	case apierrors.IsNotFound(err):
		if _, err := t.mgmt.DeleteNamespace(ctx, &skiffv1.DeleteRequest{Name: key}); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("delete namespace %s: %w", key, err)
		}
		return nil
	default:
		return err
	}
}

func policyChanged(old, new any) bool {
	o, ok1 := old.(*networkingv1.NetworkPolicy)
	n, ok2 := new.(*networkingv1.NetworkPolicy)
	return !ok1 || !ok2 || o.Generation != n.Generation || !reflect.DeepEqual(o.Spec, n.Spec)
}

// policyDocument is a NetworkPolicy as ApplyPolicies takes it, and as the
// controller stores it: apiVersion, kind, namespace and name, and spec.
func policyDocument(p *networkingv1.NetworkPolicy) (string, error) {
	b, err := json.Marshal(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]string{"namespace": p.Namespace, "name": p.Name}, "spec": p.Spec})
	if err != nil {
		return "", fmt.Errorf("encode NetworkPolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	return string(b), nil
}

func (t *term) syncPolicy(ctx context.Context, key string) error {
	p, err := t.policies.NetworkPolicies(namespaceOf(key)).Get(nameOf(key))
	switch {
	case err == nil:
		doc, err := policyDocument(p)
		if err != nil {
			return err
		}
		_, err = t.mgmt.ApplyPolicies(ctx, &skiffv1.ApplyPoliciesRequest{Documents: doc})
		if status.Code(err) == codes.InvalidArgument {
			msg := status.Convert(err).Message()
			t.refused(key, true)
			t.log.Warn("NetworkPolicy refused; the policy Skiff enforces is unchanged", "policy", key, "reason", msg)
			t.recorder.Eventf(p, corev1.EventTypeWarning, ReasonPolicyRefused,
				"Skiff refused this NetworkPolicy (%s); what Skiff enforces for it is unchanged", msg)
			return nil
		}
		if err != nil {
			return fmt.Errorf("apply NetworkPolicy %s: %w", key, err)
		}
		t.refused(key, false)
		return nil
	case apierrors.IsNotFound(err):
		t.refused(key, false)
		_, err := t.mgmt.DeletePolicy(ctx, &skiffv1.PolicyRef{Namespace: namespaceOf(key), Name: nameOf(key)})
		if err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("delete policy %s: %w", key, err)
		}
		return nil
	default:
		return err
	}
}

// refused keeps the count of refused policies (a gauge).
func (t *term) refused(key string, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refusedKeys == nil {
		t.refusedKeys = map[string]bool{}
	}
	if on {
		t.refusedKeys[key] = true
	} else {
		delete(t.refusedKeys, key)
	}
	t.m.refused.Set(float64(len(t.refusedKeys)))
}
