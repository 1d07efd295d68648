package skiff

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// Install brings up a two-node cluster and installs Skiff with kubectl.
func Install(t *testing.T, o Overlay) *cluster.Cluster {
	t.Helper()
	root := Root(t)
	imgs := Images(t, root, t.TempDir())
	c := cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: imgs})
	t.Cleanup(func() {
		if t.Failed() {
			Diagnose(t, c)
		}
	})
	start := time.Now()
	c.MustKubectl(t, "apply", "-k", WriteOverlay(t, root, c, o))
	WaitRollout(t, c, 3*time.Minute)
	c.WaitNodes(t, time.Minute, true)
	t.Logf("kubectl apply -k to every node Ready with Skiff: %v", time.Since(start))
	c.WaitDefaultServiceAccount(t, "default")
	return c
}

// TestInstall installs Skiff with kubectl on a real two-node cluster: the
// controller (StatefulSet, embedded etcd on a PersistentVolume) and the
// agents (DaemonSet, each with a certificate for its own node from a
// CertificateSigningRequest) come up, the agents install skiff-cni, the
// nodes turn Ready, and pods on the two nodes get addresses from Skiff and
// reach each other across the overlay.
func TestInstall(t *testing.T) {
	c := Install(t, Overlay{})
	c.Apply(t, probePod("a", "k1", map[string]string{"app": "a"})+probePod("b", "k2", map[string]string{"app": "b"}))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a", "pod/b", "--timeout=120s")
	a, b := podIP(t, c, "a"), podIP(t, c, "b")
	if !strings.HasPrefix(a, "198.51.100.") || !strings.HasPrefix(b, "198.51.100.") {
		t.Fatalf("pod addresses %s %s, want Skiff's pod network", a, b)
	}
	c.MustKubectl(t, "exec", "a", "--", "ping", "-c", "2", "-W", "2", b)
	c.MustKubectl(t, "exec", "b", "--", "ping", "-c", "2", "-W", "2", a)
	if out := c.MustKubectl(t, "exec", "a", "--", "nc", "-w", "2", b, "8080"); strings.TrimSpace(out) != "ok" {
		t.Errorf("TCP a -> b: %q", out)
	}

	// The pod network's egress is snat (the settings' default): a pod
	// reaches an address outside the cluster, on the underlay namespace
	// (the nodes' default route), which has no route to pod addresses.
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", outside + "/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", append([]string{"-n", c.Underlay}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	for _, p := range []string{"a", "b"} {
		c.MustKubectl(t, "exec", p, "--", "ping", "-c", "2", "-W", "2", outside)
	}
}

// outside stands for an address outside the cluster.
const outside = "203.0.113.200"
