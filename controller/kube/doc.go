// Package kube is Skiff's Kubernetes adapter: it watches the API (one
// shared informer per resource for the whole cluster, never one per node)
// and feeds the controller only through its ManagementService, as any
// other client would:
//
//   - Namespaces: their labels, for namespaceSelector (SetNamespace).
//   - Pods: an owner record "pod:NS/NAME" with the pod's labels, UID and
//     node (SetOwner), which the pod's endpoints take whatever the order
//     of the CNI ADD; host-network pods are ignored. The endpoints of a
//     pod that left the API without a CNI DEL are freed after a grace
//     period (DeleteOwner with its endpoints).
//   - NetworkPolicies: applied as Skiff compiles them (ApplyPolicies); one
//     Skiff refuses gets a Warning Event naming the field and the reason.
//   - Nodes: a deleted Node frees its endpoints (DeleteEndpoints); its
//     InternalIP is checked against its agent's underlay address; its
//     NetworkUnavailable condition follows its agent's connection (and,
//     for a dpu-host, its DPU's agent's), pushed by the controller's node
//     watch.
//
// Informers keep only what the adapter reads (transform.go), so its memory
// follows the number of pods by a small constant. Several controller
// replicas elect one adapter with a Lease.
//
//	rc, err := kube.RESTConfig("/etc/skiff/kubeconfig") // "" for in-cluster
//	ad, err := kube.New(kube.Config{LeaderElection: true}, rc, mgmtClient, log)
//	err = ad.Run(ctx)
//
// skiff-controller runs it with --kubeconfig PATH or --kube (in-cluster).
package kube
