package store

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skiff-sdn/skiff/controller/policy"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func (s *Store) policyKey(ns, name string) string { return s.k("policies", ns, name) }
func (s *Store) namespaceKey(ns string) string    { return s.k("namespaces", ns) }

// ApplyPolicies validates every NetworkPolicy in documents (YAML or JSON,
// several documents), then creates or replaces them all in one
// transaction. Nothing is stored when any document is refused.
func (s *Store) ApplyPolicies(ctx context.Context, documents string) ([]*skiffv1.Policy, error) {
	pols, err := policy.ParseYAML([]byte(documents))
	if err != nil {
		return nil, &Error{Kind: Invalid, Reason: err.Error()}
	}
	if len(pols) == 0 {
		return nil, invalid("documents", "no NetworkPolicy found")
	}
	seen := map[string]bool{}
	var ops []clientv3.Op
	var out []*skiffv1.Policy
	for _, p := range pols {
		if seen[p.Key()] {
			return nil, invalid("documents", "policy %s is given twice", p.Key())
		}
		seen[p.Key()] = true
		doc, err := json.Marshal(map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
			"metadata": map[string]string{"namespace": p.Namespace, "name": p.Name}, "spec": p.Spec})
		if err != nil {
			return nil, fmt.Errorf("store: encode policy %s: %w", p.Key(), err)
		}
		pb := &skiffv1.Policy{Namespace: p.Namespace, Name: p.Name, Document: string(doc)}
		ops = append(ops, clientv3.OpPut(s.policyKey(p.Namespace, p.Name), marshal(pb)))
		out = append(out, pb)
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: apply policies: %w", err)
	}
	for _, p := range out {
		p.Revision = resp.Header.Revision
	}
	return out, nil
}

// ListPolicies returns the policies of a namespace (all when empty), sorted.
func (s *Store) ListPolicies(ctx context.Context, namespace string) ([]*skiffv1.Policy, error) {
	prefix := s.k("policies") + "/"
	if namespace != "" {
		prefix = s.k("policies", namespace) + "/"
	}
	return list[skiffv1.Policy](ctx, s, prefix, 0, func(x *skiffv1.Policy, r int64) { x.Revision = r })
}

// DeletePolicy deletes a policy.
func (s *Store) DeletePolicy(ctx context.Context, namespace, name string) error {
	resp, err := s.cli.Delete(ctx, s.policyKey(namespace, name))
	if err != nil {
		return fmt.Errorf("store: delete policy %s/%s: %w", namespace, name, err)
	}
	if resp.Deleted == 0 {
		return errorf(NotFound, "", "policy %s/%s does not exist", namespace, name)
	}
	return nil
}

// SetNamespace creates or replaces a namespace's labels.
func (s *Store) SetNamespace(ctx context.Context, n *skiffv1.Namespace) (*skiffv1.Namespace, error) {
	if n.GetName() == "" || len(n.GetName()) > 63 || !namespaceRE.MatchString(n.GetName()) {
		return nil, invalid("name", "%q is not a valid namespace name", n.GetName())
	}
	if err := validateLabels("labels", n.GetLabels()); err != nil {
		return nil, err
	}
	out := &skiffv1.Namespace{Name: n.Name, Labels: n.Labels}
	resp, err := s.cli.Put(ctx, s.namespaceKey(n.Name), marshal(out))
	if err != nil {
		return nil, fmt.Errorf("store: set namespace %s: %w", n.Name, err)
	}
	out.Revision = resp.Header.Revision
	return out, nil
}

// DeleteNamespace forgets a namespace's labels.
func (s *Store) DeleteNamespace(ctx context.Context, name string) error {
	resp, err := s.cli.Delete(ctx, s.namespaceKey(name))
	if err != nil {
		return fmt.Errorf("store: delete namespace %s: %w", name, err)
	}
	if resp.Deleted == 0 {
		return errorf(NotFound, "", "namespace %q has no labels stored", name)
	}
	return nil
}

// ListNamespaces returns the namespaces that have labels, sorted.
func (s *Store) ListNamespaces(ctx context.Context) ([]*skiffv1.Namespace, error) {
	return list[skiffv1.Namespace](ctx, s, s.k("namespaces")+"/", 0, func(x *skiffv1.Namespace, r int64) { x.Revision = r })
}
