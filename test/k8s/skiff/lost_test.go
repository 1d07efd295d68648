package skiff

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestLostPodsAndNodes: the store loses nothing and keeps nothing when
// Kubernetes loses track of pods. A pod sandbox killed behind the
// kubelet's back leaves its pod one endpoint; a pod deleted from the API
// while its node's kubelet is dead (no CNI DEL can come) has its endpoint
// freed after the grace period; a dead kubelet's Node deleted frees the
// endpoints of its pods.
func TestLostPodsAndNodes(t *testing.T) {
	c := Install(t, Overlay{ControllerArgs: []string{"--kube-gc-grace=3s"}})
	c.Apply(t, probePod("a", "k1", map[string]string{"app": "a"})+probePod("b", "k2", map[string]string{"app": "b"})+
		probePod("b3", "k2", map[string]string{"app": "b3"}))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a", "pod/b", "pod/b3", "--timeout=120s")
	owned := func(owner string) []endpoint {
		var out []endpoint
		for _, e := range endpoints(t, c) {
			if e.Owner == owner {
				out = append(out, e)
			}
		}
		return out
	}
	if n := len(owned("pod:default/a")); n != 1 {
		t.Fatalf("pod a has %d endpoints", n)
	}

	// a's sandbox (its pause process) killed with ctr: the kubelet
	// makes a new one; a keeps exactly one endpoint.
	k1 := c.Nodes[0]
	ids, err := k1.Run("ctr", "--address", k1.ContainerdSocket(), "-n", "k8s.io", "containers", "ls", "-q",
		`labels."io.kubernetes.pod.name"==a,labels."io.cri-containerd.kind"==sandbox`)
	if err != nil || len(strings.Fields(ids)) != 1 {
		t.Fatalf("a's sandbox: %q %v", ids, err)
	}
	sandbox := strings.TrimSpace(ids)
	oldEP := owned("pod:default/a")[0].Name
	oldIP := podIP(t, c, "a")
	if out, err := k1.Run("ctr", "--address", k1.ContainerdSocket(), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", sandbox); err != nil {
		t.Fatalf("killing a's sandbox: %v\n%s", err, out)
	}
	testkit.Eventually(t, "", 2*time.Minute, func() (bool, string) {
		eps := owned("pod:default/a")
		if len(eps) != 1 || eps[0].Name == oldEP || len(eps[0].Ips) == 0 {
			return false, "pod a does not have exactly one new endpoint"
		}
		// The API's Ready may still be the dead sandbox's (the kubelet
		// has not reported yet, while the new sandbox already has its
		// endpoint): wait for the new sandbox's address and the
		// container restarted in it, ready. A ping before that found
		// no container to run in.
		want, _, _ := strings.Cut(eps[0].Ips[0], "/")
		out, _ := c.Kubectl("get", "pod", "a", "-o", `jsonpath={.status.podIP} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}`)
		if f := strings.Fields(out); len(f) != 3 || f[0] != want || f[1] == "0" || f[2] != "true" {
			return false, fmt.Sprintf("a's status %q (address, restarts, ready): not yet restarted in its new sandbox (%s) and ready", out, want)
		}
		return true, ""
	})
	if !pings(c, "a", podIP(t, c, "b")) {
		bn, _ := execIn(c, "b", "ip", "neigh")
		an, _ := execIn(c, "a", "sh", "-c", "ip addr; ip neigh; ip route")
		k2n, _ := c.Nodes[1].Run("sh", "-c", "bridge fdb show | grep -v permanent; ip neigh show dev skb4096")
		k1n, _ := c.Nodes[0].Run("sh", "-c", "ip -o link; bridge link")
		logs, _ := c.Kubectl("-n", "skiff-system", "logs", "-l", "app.kubernetes.io/name=skiff-agent", "-c", "agent", "--tail=40", "--prefix")
		t.Errorf("a (new sandbox; was %s, now %s) cannot reach b\nb: %s\na: %s\nk2: %s\nk1: %s\nagents: %s", oldIP, podIP(t, c, "a"), bn, an, k2n, k1n, logs)
	}

	// k2's kubelet dies; b is deleted from the API: no CNI DEL comes, the
	// adapter frees b's endpoint after its grace.
	k2 := c.Nodes[1]
	k2.KillKubelet()
	start := time.Now()
	c.MustKubectl(t, "delete", "pod", "b", "--force", "--grace-period=0")
	testkit.Eventually(t, "", time.Minute, func() (bool, string) {
		if len(owned("pod:default/b")) != 0 {
			return false, "b's endpoint is still in the store"
		}
		return true, ""
	})
	t.Logf("pod deleted with its kubelet dead: endpoint freed %v after the delete (grace 3 s)", time.Since(start))

	// The dead kubelet's Node deleted: the endpoints of its pods go.
	start = time.Now()
	c.MustKubectl(t, "delete", "node", "k2")
	testkit.Eventually(t, "", time.Minute, func() (bool, string) {
		for _, e := range endpoints(t, c) {
			if e.Node == "k2" {
				return false, "endpoint " + e.Name + " of node k2 is still in the store"
			}
		}
		return true, ""
	})
	t.Logf("Node deleted: its endpoints freed in %v", time.Since(start))
	if n := len(owned("pod:default/a")); n != 1 {
		t.Errorf("pod a (k1) has %d endpoints after k2 went", n)
	}
}
