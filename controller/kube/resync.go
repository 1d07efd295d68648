package kube

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/labels"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// resync queues, once the informers have synced, every object whose Skiff
// side differs from the API: what changed while no adapter ran (pods
// created before it, or deleted with their endpoints left) is reconciled
// now. Objects that already match cost nothing further.
func (t *term) resync(ctx context.Context) error {
	nsl, err := t.mgmt.ListNamespaces(ctx, &skiffv1.ListRequest{})
	if err != nil {
		return fmt.Errorf("kube: list namespaces: %w", err)
	}
	storedNS := map[string]map[string]string{}
	for _, n := range nsl.GetNamespaces() {
		storedNS[n.Name] = n.Labels
	}
	nss, err := t.nss.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nss {
		if l, ok := storedNS[n.Name]; !ok || !maps.Equal(l, n.Labels) {
			t.nsQ.Add(n.Name)
		}
		delete(storedNS, n.Name)
	}
	for name := range storedNS {
		t.nsQ.Add(name)
	}

	pl, err := t.mgmt.ListPolicies(ctx, &skiffv1.ListPoliciesRequest{})
	if err != nil {
		return fmt.Errorf("kube: list policies: %w", err)
	}
	storedPol := map[string]string{}
	for _, p := range pl.GetPolicies() {
		storedPol[p.Namespace+"/"+p.Name] = p.Document
	}
	pols, err := t.policies.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range pols {
		key := p.Namespace + "/" + p.Name
		if doc, err := policyDocument(p); err != nil || storedPol[key] != doc {
			t.policyQ.Add(key)
		}
		delete(storedPol, key)
	}
	for key := range storedPol {
		t.policyQ.Add(key)
	}

	ol, err := t.mgmt.ListOwners(ctx, &skiffv1.ListOwnersRequest{})
	if err != nil {
		return fmt.Errorf("kube: list owners: %w", err)
	}
	records := map[string]*skiffv1.Owner{}
	for _, o := range ol.GetOwners() {
		if key, ok := podKeyOf(o.Name); ok {
			records[key] = o
		}
	}
	pods, err := t.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	inAPI := map[string]bool{}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		inAPI[key] = true
		if want, ok := podOwner(p); ok && (records[key] == nil || !sameOwner(records[key], want)) {
			t.podQ.Add(key)
		}
	}
	for key := range records {
		if !inAPI[key] {
			t.podQ.Add(key) // left the API while no adapter ran
		}
	}
	// Endpoints of pods that left the API before any record was made.
	el, err := t.mgmt.ListEndpoints(ctx, &skiffv1.ListRequest{})
	if err != nil {
		return fmt.Errorf("kube: list endpoints: %w", err)
	}
	for _, e := range el.GetEndpoints() {
		if key, ok := podKeyOf(e.Owner); ok && !inAPI[key] && records[key] == nil {
			t.podQ.Add(key)
		}
	}

	nodes, err := t.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		t.nodeQ.Add(n.Name)
	}
	t.log.Info("resync queued", "namespaces", t.nsQ.Len(), "policies", t.policyQ.Len(), "pods", t.podQ.Len(), "nodes", t.nodeQ.Len())
	return nil
}
