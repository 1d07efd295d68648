package skiff

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// namedPod is a probe pod whose TCP 8080 answers its own name.
func namedPod(name, node string, labels map[string]string) string {
	return strings.Replace(probePod(name, node, labels), `echo ok\\n`, `echo `+name+`\\n`, 1)
}

// hostPod is a pod of the test image in its node's own network namespace.
func hostPod(name, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  nodeName: %s
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: skiff.local/testpod:dev
    imagePullPolicy: Never
    command: ["sleep", "3600"]
---
`, name, node)
}

// service is a Service on port 80 to the selected pods' 8080; with a
// nodePort, of type NodePort.
func service(name, selector string, nodePort int) string {
	kind, np := "ClusterIP", ""
	if nodePort > 0 {
		kind, np = "NodePort", fmt.Sprintf(", nodePort: %d", nodePort)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s}
spec:
  type: %s
  selector: {%s}
  ports: [{port: 80, targetPort: 8080, protocol: TCP%s}]
---
`, name, kind, selector, np)
}

// answer is what pod gets from ip:port (a probe pod's name), "" when
// nothing answers within a second.
func answer(c *cluster.Cluster, pod, ip, port string) string {
	out, err := execIn(c, pod, "nc", "-w", "1", ip, port)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// TestServices: Skiff's pod network with the real kube-proxy (iptables
// mode) on two nodes, shown with kubectl and the underlay only:
//   - a pod reaches a ClusterIP Service backed by pods on both nodes, and
//     is answered by both;
//   - a pod reaches itself through its own Service (hairpin);
//   - a NodePort answers from the underlay (the namespace of the control
//     plane, not a node), on the node of its backend and on the other;
//   - a node (a hostNetwork pod) reaches a pod on the other node: ping
//     and TCP.
func TestServices(t *testing.T) {
	c := Install(t, Overlay{})
	c.Apply(t, namedPod("s1", "k1", map[string]string{"name": "s1", "app": "svc"})+
		namedPod("s2", "k2", map[string]string{"name": "s2", "app": "svc"})+
		namedPod("client", "k1", map[string]string{"name": "client"})+hostPod("host1", "k1"))
	c.Apply(t, service("both", "app: svc", 0)+service("self", "name: s1", 0)+service("np", "name: s2", 30080))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/s1", "pod/s2", "pod/client", "pod/host1", "--timeout=120s")
	s1, s2 := podIP(t, c, "s1"), podIP(t, c, "s2")
	clusterIP := func(svc string) string {
		return strings.TrimSpace(c.MustKubectl(t, "get", "service", svc, "-o", "jsonpath={.spec.clusterIP}"))
	}
	both, self := clusterIP("both"), clusterIP("self")

	// kube-proxy's rules reach the nodes asynchronously: wait for the
	// first answer, then count.
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		if answer(c, "client", both, "80") == "" {
			return false, "client gets no answer from Service both at " + both + ":80"
		}
		return true, ""
	})
	seen := map[string]int{}
	for i := 0; i < 30 && (seen["s1"] == 0 || seen["s2"] == 0); i++ {
		seen[answer(c, "client", both, "80")]++
	}
	if seen["s1"] == 0 || seen["s2"] == 0 || seen[""] > 0 {
		t.Errorf("client through Service both (backends s1 on k1, s2 on k2) was answered %v, want both and no failure", seen)
	}

	// Connection rate through the Service from one pod: 200 sequential
	// connections in one exec (its own cost included), every one
	// answered.
	start := time.Now()
	out, err := execIn(c, "client", "sh", "-c", `ok=0; i=0; while [ $i -lt 200 ]; do [ -n "$(nc -w 1 `+both+` 80)" ] && ok=$((ok+1)); i=$((i+1)); done; echo $ok`)
	took := time.Since(start)
	if err != nil || strings.TrimSpace(out) != "200" {
		t.Errorf("200 connections through Service both: %q answered, %v", strings.TrimSpace(out), err)
	}
	t.Logf("200 sequential connections from a pod through a ClusterIP (backends on both nodes): %v, %.0f connections/s", took, 200/took.Seconds())

	// Hairpin: s1 through the Service that only it backs.
	testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
		if got := answer(c, "s1", self, "80"); got != "s1" {
			return false, fmt.Sprintf("s1 through its own Service self at %s:80 got %q, want s1", self, got)
		}
		return true, ""
	})

	// NodePort from the underlay: s2's node and the other one.
	for _, n := range c.Nodes {
		addr := net.JoinHostPort(n.IP, "30080")
		testkit.Eventually(t, "", 30*time.Second, func() (bool, string) {
			got, err := underlayAnswer(c, addr)
			if err != nil || got != "s2" {
				return false, fmt.Sprintf("NodePort %s (node %s, backend s2 on k2) from the underlay: %q, %v", addr, n.Name, got, err)
			}
			return true, ""
		})
	}

	// The node reaches a pod on the other node, and one on its own.
	for _, ip := range []string{s2, s1} {
		testkit.Eventually(t, "", 20*time.Second, func() (bool, string) {
			if !pings(c, "host1", ip) {
				return false, "k1 (hostNetwork pod host1) does not ping " + ip
			}
			if got := answer(c, "host1", ip, "8080"); got == "" {
				return false, "k1 (hostNetwork pod host1) gets no TCP answer from " + ip + ":8080"
			}
			return true, ""
		})
	}
}

// underlayAnswer connects to addr from the underlay namespace and returns
// what it answers.
func underlayAnswer(c *cluster.Cluster, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := c.DialUnderlay(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(io.LimitReader(conn, 64))
	return strings.TrimSpace(string(b)), err
}
