package kube

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Pods: each pod (but host-network ones) has an owner record "pod:NS/NAME"
// with its labels, UID and node, which its endpoints take (CNI ADD before
// or after). A pod that left the API is marked deleted in its record, and
// its endpoints are freed once GCGrace has passed (its CNI DEL never came:
// a lost node, a crashed runtime); normally the DEL came before and only
// the record goes.

const podPrefix = "pod:"

// ownerOf names a pod's owner record.
func ownerOf(key string) string { return podPrefix + key }

// podKeyOf is the pod key ("NS/NAME") of an owner name, if it is a pod's.
func podKeyOf(owner string) (string, bool) {
	k, ok := strings.CutPrefix(owner, podPrefix)
	return k, ok && strings.Count(k, "/") == 1
}

// podOwner is the owner record a pod should have; ok is false for a
// host-network pod, which has no Skiff endpoints.
func podOwner(p *corev1.Pod) (*skiffv1.Owner, bool) {
	if p.Spec.HostNetwork {
		return nil, false
	}
	return &skiffv1.Owner{Name: ownerOf(p.Namespace + "/" + p.Name), Namespace: p.Namespace, Labels: maps.Clone(p.Labels),
		Uid: string(p.UID), Node: p.Spec.NodeName}, true
}

// sameOwner compares what the adapter sets of a record.
func sameOwner(a, b *skiffv1.Owner) bool {
	x, y := proto.Clone(a).(*skiffv1.Owner), proto.Clone(b).(*skiffv1.Owner)
	x.Revision, y.Revision = 0, 0
	return proto.Equal(x, y)
}

func podChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := new.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return o.UID != n.UID || o.Spec.NodeName != n.Spec.NodeName || o.Spec.HostNetwork != n.Spec.HostNetwork || !maps.Equal(o.Labels, n.Labels)
}

// syncPod makes a pod's owner record match the pod, or, for a pod that
// left the API, marks its record deleted and schedules the collection of
// its endpoints.
func (t *term) syncPod(ctx context.Context, key string) error {
	p, err := t.pods.Pods(namespaceOf(key)).Get(nameOf(key))
	switch {
	case err == nil:
		want, ok := podOwner(p)
		if !ok {
			return nil
		}
		if _, err := t.mgmt.SetOwner(ctx, want); err != nil {
			if status.Code(err) == codes.InvalidArgument {
				t.log.Warn("pod refused as an owner record", "pod", key, "err", err)
				return nil
			}
			return fmt.Errorf("set owner of pod %s: %w", key, err)
		}
		t.mu.Lock()
		delete(t.gcDeadlines, key)
		t.mu.Unlock()
		return nil
	case apierrors.IsNotFound(err):
		return t.podGone(ctx, key)
	default:
		return err
	}
}

// podGone records that a pod left the API and schedules its collection
// GCGrace after it was first seen gone (kept in its record, so a new
// leader keeps the deadline).
func (t *term) podGone(ctx context.Context, key string) error {
	name := ownerOf(key)
	rec, err := t.mgmt.GetOwner(ctx, &skiffv1.GetRequest{Name: name})
	var deadline time.Time
	switch {
	case status.Code(err) == codes.NotFound:
		// No record (the adapter never saw the pod): remember the
		// deadline here.
		t.mu.Lock()
		d, ok := t.gcDeadlines[key]
		if !ok {
			d = time.Now().Add(t.cfg.GCGrace)
			t.gcDeadlines[key] = d
		}
		t.mu.Unlock()
		deadline = d
	case err != nil:
		return fmt.Errorf("get owner %s: %w", name, err)
	case rec.Deleted == nil:
		rec.Deleted = timestamppb.Now()
		if _, err := t.mgmt.SetOwner(ctx, rec); err != nil {
			return fmt.Errorf("mark owner %s deleted: %w", name, err)
		}
		deadline = rec.Deleted.AsTime().Add(t.cfg.GCGrace)
	default:
		deadline = rec.Deleted.AsTime().Add(t.cfg.GCGrace)
	}
	t.gcQ.AddAfter(key, time.Until(deadline))
	return nil
}

// collectPod frees the endpoints of a pod gone for GCGrace, with its
// owner record, unless the pod came back (a new incarnation keeps its
// record).
func (t *term) collectPod(ctx context.Context, key string) error {
	if _, err := t.pods.Pods(namespaceOf(key)).Get(nameOf(key)); err == nil {
		return nil
	}
	name := ownerOf(key)
	rec, err := t.mgmt.GetOwner(ctx, &skiffv1.GetRequest{Name: name})
	var freed []string
	switch {
	case status.Code(err) == codes.NotFound:
		t.mu.Lock()
		d, ok := t.gcDeadlines[key]
		t.mu.Unlock()
		if ok && time.Now().Before(d) {
			t.gcQ.AddAfter(key, time.Until(d))
			return nil
		}
		r, err := t.mgmt.DeleteEndpoints(ctx, &skiffv1.DeleteEndpointsRequest{Owner: name})
		if err != nil {
			return fmt.Errorf("delete endpoints of %s: %w", name, err)
		}
		freed = r.GetDeleted()
		t.mu.Lock()
		delete(t.gcDeadlines, key)
		t.mu.Unlock()
	case err != nil:
		return fmt.Errorf("get owner %s: %w", name, err)
	case rec.Deleted == nil:
		return nil // the pod is back
	case time.Now().Before(rec.Deleted.AsTime().Add(t.cfg.GCGrace)):
		t.gcQ.AddAfter(key, time.Until(rec.Deleted.AsTime().Add(t.cfg.GCGrace)))
		return nil
	default:
		r, err := t.mgmt.DeleteOwner(ctx, &skiffv1.DeleteOwnerRequest{Name: name, Uid: rec.Uid, Endpoints: true})
		switch status.Code(err) {
		case codes.OK:
		case codes.NotFound, codes.FailedPrecondition:
			return nil // gone meanwhile, or a new incarnation set it
		default:
			return fmt.Errorf("delete owner %s: %w", name, err)
		}
		freed = r.GetEndpoints()
	}
	if len(freed) > 0 {
		t.m.collected.Add(float64(len(freed)))
		t.log.Info("freed the endpoints of a pod that left the API without a CNI DEL", "pod", key, "endpoints", freed, "grace", t.cfg.GCGrace)
	}
	return nil
}

func namespaceOf(key string) string { ns, _, _ := strings.Cut(key, "/"); return ns }
func nameOf(key string) string      { _, n, _ := strings.Cut(key, "/"); return n }
