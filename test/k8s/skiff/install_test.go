package skiff

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
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

	// A NetworkPolicy's egress ipBlock still applies to what leaves the
	// cluster: a may go anywhere but outside; b, not selected, still may.
	c.Apply(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-not-outside, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 0.0.0.0/0, except: [`+outside+`/32]}}]
`)
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		if pings(c, "a", outside) {
			return false, "a still reaches " + outside + ", which its egress policy excepts"
		}
		return true, ""
	})
	if !pings(c, "b", outside) {
		t.Error("b, which no egress policy selects, no longer reaches the outside")
	}
	if !pings(c, "a", b) {
		t.Error("a no longer reaches b, which its egress ipBlock (0.0.0.0/0 except the outside) admits")
	}
}

// TestEgressNone: a pod network with egress none (podNetwork.egress in
// the settings) keeps pods inside: they reach each other across nodes,
// but not an address outside the cluster, and the outside does not reach
// them even with a route to their subnet.
func TestEgressNone(t *testing.T) {
	c := Install(t, Overlay{Settings: strings.Replace(DefaultSettings, "  create: true\n", "  create: true\n  egress: none\n", 1)})
	c.Apply(t, probePod("a", "k1", map[string]string{"app": "a"})+probePod("b", "k2", map[string]string{"app": "b"}))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a", "pod/b", "--timeout=120s")
	a, b := podIP(t, c, "a"), podIP(t, c, "b")
	if out := skiffctl(t, c, "get", "network", "pods", "-o", "json"); !strings.Contains(out, `"egress": "none"`) {
		t.Fatalf("the pod network is not egress none:\n%s", out)
	}
	if !pings(c, "a", b) || !pings(c, "b", a) {
		t.Fatal("pods of an egress none network do not reach each other across nodes")
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", outside + "/32", "dev", "lo"},
		{"route", "add", "198.51.100.0/24", "via", c.Nodes[0].IP}} {
		if out, err := exec.Command("ip", append([]string{"-n", c.Underlay}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	for _, p := range []string{"a", "b"} {
		if pings(c, p, outside) {
			t.Errorf("%s reaches the outside on a network with egress none", p)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", c.Underlay, "ping", "-c", "1", "-W", "1", a).CombinedOutput(); err == nil {
		t.Errorf("the outside reaches pod a (%s) on a network with egress none:\n%s", a, out)
	}
}

// outside stands for an address outside the cluster.
const outside = "203.0.113.200"
