// Package kubemem measures the Kubernetes adapter's memory (controller/
// kube) at thousands of simulated pods: BenchmarkAdapterMemory, on a
// control-plane-only test cluster (test/k8s/cluster). It needs root, the
// Kubernetes binaries of hack/k8s/setup.sh and bin/skiff-controller
// (make build); a plain go test runs nothing here.
package kubemem
