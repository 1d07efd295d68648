package skiff

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// vethCount is how many veth links a node's namespace has.
func vethCount(t *testing.T, n *cluster.Node) int {
	t.Helper()
	out, err := n.Run("ip", "-o", "link", "show", "type", "veth")
	if err != nil {
		t.Fatalf("%s: %v\n%s", n.Name, err, out)
	}
	return strings.Count(out, "\n")
}

// cniCache lists the node runtime's cached CNI results that mention name.
func cniCache(n *cluster.Node, name string) []string {
	files, _ := filepath.Glob(filepath.Join(n.CNICacheDir(), "results", "*"))
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), name) {
			out = append(out, f)
		}
	}
	return out
}

// TestScaleAndRBAC scales a Deployment 0 -> 30 -> 0 on two nodes: every
// pod gets its own address, and afterwards no endpoint, link or cached CNI
// result is left and no agent logged an error. The ServiceAccounts can do
// what RBAC gives them and nothing else.
func TestScaleAndRBAC(t *testing.T) {
	c := Install(t, Overlay{})
	for _, q := range []struct {
		sa, verb, what string
		want           string
	}{
		{"skiff-agent", "get", "secrets", "no"},
		{"skiff-agent", "create", "pods", "no"},
		{"skiff-agent", "patch", "pods", "no"},
		{"skiff-agent", "list", "pods", "no"},
		{"skiff-agent", "create", "certificatesigningrequests", "yes"},
		{"skiff-controller", "get", "secrets", "no"},
		{"skiff-controller", "create", "pods", "no"},
		{"skiff-controller", "delete", "pods", "no"},
		{"skiff-controller", "watch", "pods", "yes"},
		{"skiff-controller", "patch", "nodes --subresource=status", "yes"},
		{"skiff-controller", "patch", "nodes", "no"},
	} {
		args := append([]string{"auth", "can-i", q.verb}, strings.Fields(q.what)...)
		out, _ := c.Kubectl(append(args, "-A", "--as=system:serviceaccount:skiff-system:"+q.sa)...)
		if strings.TrimSpace(out) != q.want {
			t.Errorf("can %s %s %s? %q, want %q", q.sa, q.verb, q.what, strings.TrimSpace(out), q.want)
		}
	}

	before := map[string]int{}
	for _, n := range c.Nodes {
		before[n.Name] = vethCount(t, n)
	}
	c.Apply(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: burst}
spec:
  replicas: 0
  selector: {matchLabels: {app: burst}}
  template:
    metadata: {labels: {app: burst}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, command: ["/bin/sh", "-c", "exec sleep 3600"]}
`)
	start := time.Now()
	c.MustKubectl(t, "scale", "deployment", "burst", "--replicas=30")
	c.MustKubectl(t, "rollout", "status", "deployment/burst", "--timeout=5m")
	t.Logf("scale 0 -> 30 to every pod Ready: %v", time.Since(start))
	out := c.MustKubectl(t, "get", "pods", "-l", "app=burst", "-o", `jsonpath={range .items[*]}{.status.podIP} {.spec.nodeName}{"\n"}{end}`)
	ips, nodes := map[string]bool{}, map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasPrefix(f[0], "198.51.100.") || ips[f[0]] {
			t.Fatalf("pod address line %q (duplicate or not Skiff's):\n%s", l, out)
		}
		ips[f[0]] = true
		nodes[f[1]]++
	}
	if len(ips) != 30 {
		t.Fatalf("%d addresses for 30 pods", len(ips))
	}
	t.Logf("pods per node: %v", nodes)
	for _, n := range c.Nodes {
		if f := cniCache(n, "burst-"); n.Name == "k1" && len(f) == 0 {
			t.Fatalf("no cached CNI result of the burst on %s in %s: the leak check below would check nothing", n.Name, n.CNICacheDir())
		}
	}
	if n := len(endpoints(t, c)); n != 30 {
		t.Errorf("Skiff holds %d endpoints for 30 pods", n)
	}

	start = time.Now()
	c.MustKubectl(t, "scale", "deployment", "burst", "--replicas=0")
	testkit.Eventually(t, "", 3*time.Minute, func() (bool, string) {
		out, _ := c.Kubectl("get", "pods", "-l", "app=burst", "-o", "name")
		if strings.TrimSpace(out) != "" {
			return false, "pods left:\n" + out
		}
		return true, ""
	})
	t.Logf("scale 30 -> 0 to every pod gone: %v", time.Since(start))
	testkit.Eventually(t, "", time.Minute, func() (bool, string) {
		if eps := endpoints(t, c); len(eps) != 0 {
			return false, "endpoints left in Skiff's store"
		}
		for _, n := range c.Nodes {
			if v := vethCount(t, n); v != before[n.Name] {
				return false, n.Name + ": veth links left"
			}
		}
		for _, n := range c.Nodes {
			if f := cniCache(n, "burst-"); len(f) > 0 {
				return false, "cached CNI results left: " + strings.Join(f, " ")
			}
		}
		return true, ""
	})
	if errs := agentErrors(t, c); len(errs) > 0 {
		t.Errorf("agents logged errors:\n%s", strings.Join(errs, "\n"))
	}
}
