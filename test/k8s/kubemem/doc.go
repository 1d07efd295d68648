// Package kubemem runs the Kubernetes adapter (controller/kube) against a
// control-plane-only test cluster (test/k8s/cluster: kube-apiserver and
// etcd, Node objects without kubelets) and the real skiff-controller:
//
//   - BenchmarkAdapterMemory measures the adapter's memory at thousands
//     of simulated pods;
//   - TestDPUHostNetworkUnavailable shows a dpu-host node's Node marked
//     NetworkUnavailable while its DPU's agent is away, and cleared when
//     it returns.
//
// It needs root, the Kubernetes binaries of hack/k8s/setup.sh and
// bin/skiff-controller (make build).
package kubemem
