package kube

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// The informers keep only what the adapter reads of each object, so that
// their caches grow with the object count by a small constant: a pod is
// its name, namespace, UID, labels, node and host-network flag (no spec,
// status, managed fields or annotations).

// meta keeps the identity of an object and its labels.
func meta(m metav1.ObjectMeta, labels bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp}
	if labels {
		out.Labels = m.Labels
	}
	return out
}

// transform is the informers' transform function: each kind is cut to
// what the adapter needs. Tombstones pass through (their object was
// transformed when it entered the cache).
func transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Namespace:
		return &corev1.Namespace{ObjectMeta: meta(o.ObjectMeta, true)}, nil
	case *corev1.Node:
		return slimNode(o), nil
	case *networkingv1.NetworkPolicy:
		return &networkingv1.NetworkPolicy{ObjectMeta: meta(o.ObjectMeta, false), Spec: o.Spec}, nil
	}
	return obj, nil
}

func slimPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: meta(p.ObjectMeta, true),
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork}}
}

// slimNode keeps a node's internal addresses and its NetworkUnavailable
// condition.
func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{ObjectMeta: meta(n.ObjectMeta, false)}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out
}

var _ cache.TransformFunc = transform
