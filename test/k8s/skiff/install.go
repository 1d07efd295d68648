// Package skiff installs Skiff into a test cluster (test/k8s/cluster) the
// way an operator does, with kubectl apply -k deploy/kubernetes/..., from
// the image make image builds, and holds the real-cluster tests.
package skiff

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/images"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// Root is the repository's root, from this package's directory.
func Root(t testing.TB) string {
	t.Helper()
	r, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Images writes the pause, test pod and Skiff images into dir from the
// binaries of bin (make build; the pause binary is built here).
func Images(t testing.TB, root, dir string) []string {
	t.Helper()
	bin := filepath.Join(root, "bin")
	for _, b := range images.SkiffBinaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s: run make build first: %v", b, err)
		}
	}
	pause, testpod := cluster.TestImages(t, dir)
	skiff := filepath.Join(dir, "skiff.tar")
	if err := images.Write("skiff", bin, skiff); err != nil {
		t.Fatal(err)
	}
	out := []string{pause, testpod, skiff}
	return out
}

// Overlay is what a test changes of the software overlay.
type Overlay struct {
	// Settings replaces skiff.yaml (the ConfigMap); empty: the test
	// default (pod network 198.51.100.0/24, VNI 4096, mode software).
	Settings string
	// ControllerArgs are added to the controller's.
	ControllerArgs []string
}

// DefaultSettings are the test cluster's settings; {dir} is the cluster's
// directory, where every node's files are.
const DefaultSettings = `mode: software
podNetwork:
  name: pods
  vni: 4096
  create: true
  subnets:
  - {name: pods-v4, cidr: 198.51.100.0/24}
cni:
  binDir: {dir}/{node}/cni/bin
  confDir: {dir}/{node}/cni/net.d
`

// WriteOverlay writes a kustomization over deploy/kubernetes/overlays/
// software for the test cluster c, and returns its directory: images are
// never pulled, the controller runs on k1 (tests kill k2's kubelet), the nodes' CNI directories, pod namespaces, agent sockets
// and state are under the cluster's directory (several nodes share this
// machine), and the controller's volume is a hostPath PersistentVolume.
func WriteOverlay(t testing.TB, root string, c *cluster.Cluster, o Overlay) string {
	t.Helper()
	dir := filepath.Join(c.Dir, "overlay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	settings := o.Settings
	if settings == "" {
		settings = DefaultSettings
	}
	settings = strings.ReplaceAll(settings, "{dir}", c.Dir)
	indent := func(s string, n int) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
	}
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy/kubernetes/overlays/software"))
	if err != nil {
		t.Fatal(err)
	}
	var ctrlArgs string
	for _, a := range o.ControllerArgs {
		ctrlArgs += fmt.Sprintf("    - op: add\n      path: /spec/template/spec/containers/0/args/-\n      value: %q\n", a)
	}
	run := filepath.Join(c.Dir, "skiff-run")
	state := filepath.Join(c.Dir, "skiff-state")
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
- pv.yaml
patches:
- target: {kind: ConfigMap, name: skiff-config}
  patch: |-
    - op: replace
      path: /data/skiff.yaml
      value: |
%s
- target: {kind: StatefulSet, name: skiff-controller}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: Never
    - op: add
      path: /spec/template/spec/nodeSelector
      value: {kubernetes.io/hostname: k1}
%s- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: skiff-agent, namespace: skiff-system}
    spec:
      template:
        spec:
          initContainers:
          - {name: certificate, imagePullPolicy: Never}
          containers:
          - name: agent
            imagePullPolicy: Never
            volumeMounts:
            - {name: cluster, mountPath: %q, mountPropagation: HostToContainer}
            - {name: run, mountPath: /run/skiff, $patch: delete}
            - {name: run, mountPath: %q}
            - {name: netns, mountPath: /var/run/netns, mountPropagation: None}
          volumes:
          - {name: cluster, hostPath: {path: %q, type: Directory}}
          - {name: state, hostPath: {path: %q, type: DirectoryOrCreate}}
          - {name: run, hostPath: {path: %q, type: DirectoryOrCreate}}
- target: {kind: DaemonSet, name: skiff-agent}
  patch: |-
    - op: test
      path: /spec/template/spec/containers/0/args/5
      value: --socket=/run/skiff/$(NODE_NAME)/agent.sock
    - op: replace
      path: /spec/template/spec/containers/0/args/5
      value: --socket=%s/$(NODE_NAME)/agent.sock
`, base, indent(settings, 8), ctrlArgs, c.Dir, run, c.Dir, state, run, run)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: skiff-controller-data}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: %q, type: DirectoryOrCreate}
`, filepath.Join(c.Dir, "controller-data"))
	if err := os.WriteFile(filepath.Join(dir, "pv.yaml"), []byte(pv), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Diagnose logs what Skiff's pods say, for a failed test.
func Diagnose(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"-n", "skiff-system", "describe", "pods"},
		{"-n", "skiff-system", "logs", "--all-containers", "--prefix", "--tail=60", "-l", "app.kubernetes.io/name=skiff-agent"},
		{"-n", "skiff-system", "logs", "--all-containers", "--prefix", "--tail=60", "-l", "app.kubernetes.io/name=skiff-controller"},
		{"-n", "skiff-system", "logs", "--previous", "--tail=30", "skiff-controller-0"},
		{"get", "csr"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, _ := c.Kubectl(args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}

// WaitRollout waits until the controller and every node's agent are ready.
func WaitRollout(t testing.TB, c *cluster.Cluster, within time.Duration) {
	t.Helper()
	defer func() {
		if t.Failed() {
			Diagnose(t, c)
		}
	}()
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "statefulset/skiff-controller", "--timeout="+within.String())
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "daemonset/skiff-agent", "--timeout="+within.String())
}
