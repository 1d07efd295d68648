package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/images"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// buildImages writes the pause and test pod images into dir.
func buildImages(t *testing.T, dir string) (pause, testpod string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/skiff-sdn/skiff/test/k8s/images/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	pause, testpod = filepath.Join(dir, "pause.tar"), filepath.Join(dir, "testpod.tar")
	if err := images.Write("pause", dir, pause, ""); err != nil {
		t.Fatal(err)
	}
	if err := images.Write("testpod", dir, testpod, ""); err != nil {
		t.Fatal(err)
	}
	return pause, testpod
}

// referencePlugins builds the CNI project's bridge, host-local and
// loopback plugins into dir.
func referencePlugins(t *testing.T, dir string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local", "github.com/containernetworking/plugins/plugins/main/loopback")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the reference plugins: %v\n%s", err, out)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// TestClusterWithReferenceCNI brings up two nodes with the CNI project's
// bridge plugin as their network: pods are scheduled on each, become
// Ready, reach each other on one node, kubectl exec and logs work, a
// hostNetwork DaemonSet runs on both nodes, a kubelet restart keeps its
// pods, and deleting the pods leaves the nodes clean.
func TestClusterWithReferenceCNI(t *testing.T) {
	work := t.TempDir()
	pause, testpod := buildImages(t, work)
	plugins := filepath.Join(work, "plugins")
	referencePlugins(t, plugins)
	start := time.Now()
	c := cluster.Start(t, cluster.Options{Nodes: 2, Images: []string{pause, testpod},
		BeforeKubelet: func(n *cluster.Node) error {
			for _, p := range []string{"bridge", "host-local", "loopback"} {
				if err := copyFile(filepath.Join(plugins, p), filepath.Join(n.CNIBinDir(), p), 0o755); err != nil {
					return err
				}
			}
			subnet := map[string]string{"k1": "203.0.113.0/25", "k2": "203.0.113.128/25"}[n.Name]
			conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ref","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,
				"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, subnet, filepath.Join(n.Dir, "host-local"))
			return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-ref.conflist"), []byte(conf), 0o644)
		}})
	c.WaitNodes(t, 2*time.Minute, true)
	t.Logf("cluster start to nodes Ready: %v", time.Since(start))
	c.WaitDefaultServiceAccount(t, "default")

	pod := func(name, node string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: probe}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, command: ["/bin/sh", "-c", "echo started; exec sleep 3600"]}
---
`, name, node)
	}
	created := time.Now()
	c.Apply(t, pod("a1", "k1")+pod("a2", "k1")+pod("b1", "k2"))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a1", "pod/a2", "pod/b1", "--timeout=120s")
	t.Logf("3 pods created to Ready: %v", time.Since(created))
	ip := func(name string) string {
		return strings.TrimSpace(c.MustKubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}"))
	}
	if a2 := ip("a2"); !strings.HasPrefix(a2, "203.0.113.") {
		t.Fatalf("a2 has address %q", a2)
	}
	if out, err := c.Kubectl("exec", "a1", "--", "ping", "-c", "1", "-W", "2", ip("a2")); err != nil {
		d, _ := c.Nodes[0].Run("sh", "-c", "ip -d link show cni0; ip addr; iptables-save; sysctl net.bridge.bridge-nf-call-iptables; bridge link")
		e, _ := c.Kubectl("exec", "a1", "--", "sh", "-c", "id; ip addr; ip route; ping -c1 -W1 "+ip("a2")+"; echo rc=$?")
		t.Fatalf("ping: %v %q\n%s\n%s", err, out, d, e)
	}
	if out := c.Logs(t, "default", "b1"); !strings.Contains(out, "started") {
		t.Errorf("logs of b1: %q", out)
	}

	// A privileged hostNetwork DaemonSet, as Skiff's agent will be.
	c.Apply(t, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: hostnet}
spec:
  selector: {matchLabels: {app: hostnet}}
  template:
    metadata: {labels: {app: hostnet}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, securityContext: {privileged: true},
         command: ["/bin/sh", "-c", "ip -o addr show eth0; exec sleep 3600"]}
`)
	c.MustKubectl(t, "rollout", "status", "daemonset/hostnet", "--timeout=120s")
	out := c.MustKubectl(t, "get", "pods", "-l", "app=hostnet", "-o", "jsonpath={range .items[*]}{.status.podIP}{\" \"}{end}")
	if !strings.Contains(out, "192.0.2.1") || !strings.Contains(out, "192.0.2.2") {
		t.Errorf("hostNetwork pods have addresses %q, want the nodes'", out)
	}

	// The kubelet of k1 restarts: its pods stay, and it takes them back.
	uid := c.MustKubectl(t, "get", "pod", "a1", "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	c.Nodes[0].StopKubelet()
	if err := c.Nodes[0].StartKubelet(); err != nil {
		t.Fatal(err)
	}
	c.Nodes[0].WaitKubelet(t, time.Minute)
	c.MustKubectl(t, "exec", "a1", "--", "ping", "-c", "1", "-W", "2", ip("a2"))
	if now := c.MustKubectl(t, "get", "pod", "a1", "-o", "jsonpath={.status.containerStatuses[0].containerID}"); now != uid {
		t.Errorf("a1's container changed across the kubelet restart: %s -> %s", uid, now)
	}

	c.MustKubectl(t, "delete", "pod", "a1", "a2", "b1", "--wait=true", "--timeout=60s")
	c.MustKubectl(t, "delete", "daemonset", "hostnet", "--wait=true", "--timeout=60s")
	for _, n := range c.Nodes {
		ents, _ := os.ReadDir(filepath.Join(n.Dir, "host-local", "ref"))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "203.") {
				t.Errorf("%s: host-local still holds %s after every pod was deleted", n.Name, e.Name())
			}
		}
	}
}
