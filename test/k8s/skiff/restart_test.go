package skiff

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// networkUnavailable is the Node's NetworkUnavailable condition status
// and reason.
func networkUnavailable(t *testing.T, c *cluster.Cluster, node string) string {
	t.Helper()
	out, _ := c.Kubectl("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="NetworkUnavailable")].status} {.status.conditions[?(@.type=="NetworkUnavailable")].reason}`)
	return strings.TrimSpace(out)
}

// TestRestartsKeepTraffic restarts the controller's pod and each agent's
// pod while a ping flow crosses the nodes: no packet is lost. Pods
// deleted while the controller is down finish terminating, and their
// endpoints are gone once it is back. A node whose agent stops gets
// NetworkUnavailable, and loses it when the agent returns (both timed).
func TestRestartsKeepTraffic(t *testing.T) {
	c := Install(t, Overlay{})
	c.Apply(t, probePod("a", "k1", map[string]string{"app": "a"})+probePod("b", "k2", map[string]string{"app": "b"})+
		probePod("b2", "k2", map[string]string{"app": "b2"}))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a", "pod/b", "pod/b2", "--timeout=120s")
	b := podIP(t, c, "b")
	for _, n := range []string{"k1", "k2"} {
		if got := networkUnavailable(t, c, n); got != "False SkiffAgentConnected" {
			t.Errorf("%s NetworkUnavailable %q with its agent running", n, got)
		}
	}

	// 5 pings a second for 45 s from a (k1) to b (k2), through every
	// restart below.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flow := exec.CommandContext(ctx, "nsenter", "--net="+testkit.Path(c.Underlay), "--", cluster.Bin(t, "kubectl"),
		"--kubeconfig", c.Kubeconfig, "exec", "a", "--", "ping", "-i", "0.2", "-c", "225", "-W", "1", b)
	var flowOut strings.Builder
	flow.Stdout, flow.Stderr = &flowOut, &flowOut
	if err := flow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	restart := func(what string, sel ...string) {
		t.Helper()
		get := append([]string{"-n", "skiff-system", "get", "pods"}, sel...)
		old := strings.TrimSpace(c.MustKubectl(t, append(get, "-o", "jsonpath={.items[0].metadata.uid}")...))
		c.MustKubectl(t, append(append([]string{"-n", "skiff-system", "delete", "pods"}, sel...), "--wait=true")...)
		took := testkit.Eventually(t, what+" back", 2*time.Minute, func() (bool, string) {
			out, _ := c.Kubectl(append(get, "-o", `jsonpath={range .items[*]}{.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)...)
			f := strings.Fields(out)
			return len(f) == 2 && f[0] != old && f[1] == "True", ""
		})
		t.Logf("%s: deleted to Ready again in %v", what, took)
	}
	restart("controller pod", "-l", "app.kubernetes.io/name=skiff-controller")
	for _, n := range []string{"k1", "k2"} {
		restart("agent pod on "+n, "-l", "app.kubernetes.io/name=skiff-agent", "--field-selector", "spec.nodeName="+n)
	}
	if err := flow.Wait(); err != nil {
		t.Fatalf("ping flow: %v\n%s", err, flowOut.String())
	}
	if !strings.Contains(flowOut.String(), " 0% packet loss") {
		t.Fatalf("packets lost across the restarts:\n%s", flowOut.String())
	}
	t.Logf("ping flow: %s", lastLines(flowOut.String(), 2))

	// The controller down: a pod deleted meanwhile finishes terminating.
	c.MustKubectl(t, "-n", "skiff-system", "scale", "statefulset", "skiff-controller", "--replicas=0")
	c.MustKubectl(t, "-n", "skiff-system", "wait", "--for=delete", "pod/skiff-controller-0", "--timeout=60s")
	start := time.Now()
	c.MustKubectl(t, "delete", "pod", "b2", "--wait=true", "--timeout=60s")
	t.Logf("pod deleted with the controller down: gone in %v", time.Since(start))
	c.MustKubectl(t, "-n", "skiff-system", "scale", "statefulset", "skiff-controller", "--replicas=1")
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "statefulset/skiff-controller", "--timeout=120s")
	testkit.Eventually(t, "", time.Minute, func() (bool, string) {
		for _, e := range endpoints(t, c) {
			if e.Owner == "pod:default/b2" {
				return false, "b2's endpoint is still in the store"
			}
		}
		return true, ""
	})

	// The agent of k2 stops (the DaemonSet leaves k2), then returns.
	c.MustKubectl(t, "label", "node", "k1", "skiff-test-agent=on")
	c.MustKubectl(t, "-n", "skiff-system", "patch", "daemonset", "skiff-agent", "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"skiff-test-agent":"on"}}}}}`)
	testkit.Eventually(t, "k2's agent gone", 2*time.Minute, func() (bool, string) {
		out, _ := c.Kubectl("-n", "skiff-system", "get", "pods", "-l", "app.kubernetes.io/name=skiff-agent", "--field-selector", "spec.nodeName=k2", "-o", "name")
		return strings.TrimSpace(out) == "", ""
	})
	down := testkit.Eventually(t, "k2 NetworkUnavailable", time.Minute, func() (bool, string) {
		return strings.HasPrefix(networkUnavailable(t, c, "k2"), "True"), ""
	})
	t.Logf("agent pod of k2 gone -> NetworkUnavailable True (%s) in %v", networkUnavailable(t, c, "k2"), down)
	if !pings(c, "a", b) {
		t.Error("b (k2) stopped answering while k2's agent is away: the datapath must keep forwarding")
	}
	start = time.Now()
	c.MustKubectl(t, "-n", "skiff-system", "patch", "daemonset", "skiff-agent", "--type=json", "-p",
		`[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
	testkit.Eventually(t, "k2 NetworkUnavailable cleared", 2*time.Minute, func() (bool, string) {
		return strings.HasPrefix(networkUnavailable(t, c, "k2"), "False"), ""
	})
	t.Logf("DaemonSet back on k2 -> NetworkUnavailable False in %v (includes the agent pod's start)", time.Since(start))
	if errs := agentErrors(t, c); len(errs) > 0 {
		t.Errorf("agents logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return fmt.Sprint(strings.Join(l, " | "))
}
