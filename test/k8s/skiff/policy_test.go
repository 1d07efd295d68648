package skiff

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// inPolicySet waits until an address shows in the node's nftables policy
// table (the agent's enforcement state), and returns how long it took from
// start.
func inPolicySet(t *testing.T, n *cluster.Node, ip string, want bool, start time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("nsenter", "--net="+testkit.Path(n.NS), "--", "nft", "list", "table", "inet", "skiff-policy").CombinedOutput()
		if regexp.MustCompile(regexp.QuoteMeta(ip)+`[^0-9]`).Match(out) == want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s the policy sets of %s after 20 s:\n%s", ip, map[bool]string{true: "never reached", false: "never left"}[want], n.Name, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPolicyWithKubectl: a NetworkPolicy applied with kubectl is enforced
// as Kubernetes specifies; a pod's label change and a namespace's label
// change move pods in and out of it within a second (measured, at the
// node's nftables, then with real traffic); a policy Skiff refuses gets an
// Event naming the field, and nothing of it is enforced.
func TestPolicyWithKubectl(t *testing.T) {
	c := Install(t, Overlay{})
	c.MustKubectl(t, "create", "namespace", "other")
	c.WaitDefaultServiceAccount(t, "other")
	c.Apply(t, probePod("a", "k1", map[string]string{"app": "a"})+probePod("b", "k2", map[string]string{"app": "b"})+
		probePod("c", "k1", map[string]string{"app": "c"}))
	c.Apply(t, strings.Replace(probePod("d", "k1", map[string]string{"app": "d"}), "metadata: {", "metadata: {namespace: other, ", 1))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a", "pod/b", "pod/c", "--timeout=120s")
	c.MustKubectl(t, "-n", "other", "wait", "--for=condition=Ready", "pod/d", "--timeout=120s")
	a, b, cc := podIP(t, c, "a"), podIP(t, c, "b"), podIP(t, c, "c")
	d := strings.TrimSpace(c.MustKubectl(t, "-n", "other", "get", "pod", "d", "-o", "jsonpath={.status.podIP}"))
	for _, from := range []string{"a", "c"} {
		if !connects(c, from, b) {
			t.Fatalf("%s cannot reach b before any policy", from)
		}
	}
	// b admits TCP 8080 from app=a in its namespace, and from any pod of
	// a namespace labelled team=blue.
	c.Apply(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-ingress, namespace: default}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {app: a}}
    - namespaceSelector: {matchLabels: {team: blue}}
    ports: [{protocol: TCP, port: 8080}]
`)
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		if connects(c, "c", b) {
			return false, "c still reaches b under the policy"
		}
		return true, ""
	})
	if !connects(c, "a", b) {
		t.Error("a (app=a) cannot reach b:8080 under the policy that admits it")
	}
	if pings(c, "a", b) {
		t.Error("a pings b: the policy admits TCP 8080 only")
	}
	if !connects(c, "b", a) {
		t.Error("b cannot reach a, which no policy isolates")
	}
	if connects(c, "other/d", b) {
		t.Error("d (namespace other, not team=blue) reaches b")
	}

	// A pod's label: c becomes app=a.
	start := time.Now()
	c.MustKubectl(t, "label", "pod", "c", "app=a", "--overwrite")
	took := inPolicySet(t, c.Nodes[1], cc, true, start)
	if !connects(c, "c", b) {
		t.Error("c (now app=a) cannot reach b")
	}
	t.Logf("kubectl label pod (c in) to enforcement on b's node: %v", took)
	start = time.Now()
	c.MustKubectl(t, "label", "pod", "c", "app=c", "--overwrite")
	tookOut := inPolicySet(t, c.Nodes[1], cc, false, start)
	t.Logf("kubectl label pod (c out) to enforcement: %v", tookOut)

	// A namespace's label: other becomes team=blue.
	start = time.Now()
	c.MustKubectl(t, "label", "namespace", "other", "team=blue")
	tookNS := inPolicySet(t, c.Nodes[1], d, true, start)
	if !connects(c, "other/d", b) {
		t.Error("d (namespace team=blue) cannot reach b")
	}
	t.Logf("kubectl label namespace to enforcement: %v", tookNS)
	for _, d := range []time.Duration{took, tookOut, tookNS} {
		if d > time.Second {
			t.Logf("NOTE: a label change took %v to reach enforcement (more than a second)", d)
		}
	}

	// A policy Skiff refuses (a named port): an Event names the field;
	// the policy in force is untouched.
	c.Apply(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: named-port, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - ports: [{protocol: TCP, port: http}]
`)
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		out, _ := c.Kubectl("get", "events", "--field-selector", "involvedObject.kind=NetworkPolicy,involvedObject.name=named-port",
			"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		if !strings.Contains(out, "PolicyRefused") || !strings.Contains(out, "port") {
			return false, fmt.Sprintf("no PolicyRefused event naming the port: %q", out)
		}
		t.Logf("event: %s", strings.TrimSpace(out))
		return true, ""
	})
	if !connects(c, "b", a) {
		t.Error("the refused policy isolated a")
	}
	if out := skiffctl(t, c, "get", "policies"); strings.Contains(out, "named-port") {
		t.Errorf("Skiff holds the refused policy:\n%s", out)
	}
	// Deleting the policy with kubectl lifts it.
	c.MustKubectl(t, "delete", "networkpolicy", "b-ingress")
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		if !connects(c, "c", b) {
			return false, "c does not reach b once the policy is deleted"
		}
		return true, ""
	})
}
