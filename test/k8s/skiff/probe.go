package skiff

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// What the tests and make demo-k8s do to Skiff's pods: run skiffctl in
// the controller's pod, start probe pods, and probe with real traffic.

// Skiffctl runs skiffctl inside the controller's pod, as an operator with
// a certificate of the controller's CA (the controller's own, which is
// not a node's).
func Skiffctl(t testing.TB, c *cluster.Cluster, args ...string) string {
	t.Helper()
	ip := strings.TrimSpace(c.MustKubectl(t, "-n", "skiff-system", "get", "pod", "skiff-controller-0", "-o", "jsonpath={.status.podIP}"))
	base := []string{"-n", "skiff-system", "exec", "skiff-controller-0", "--", "/usr/local/bin/skiffctl", "--controller", ip + ":7400",
		"--tls-ca", "/var/lib/skiff/ca/ca.pem", "--tls-cert", "/var/lib/skiff/ca/server.pem", "--tls-key", "/var/lib/skiff/ca/server-key.pem"}
	return c.MustKubectl(t, append(base, args...)...)
}

// ProbePod is a pod of the test image on node, sleeping, with labels; it
// answers "ok" on TCP 8080 (its readiness probe).
func ProbePod(name, node string, labels map[string]string) string {
	var l []string
	for k, v := range labels {
		l = append(l, fmt.Sprintf("%s: %q", k, v))
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {%s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: skiff.local/testpod:dev
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "printf '#!/bin/sh\\necho ok\\n' >/tmp/ok; chmod +x /tmp/ok; nc -ll -p 8080 -e /tmp/ok & exec sleep 3600"]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
---
`, name, strings.Join(l, ", "), node)
}

// PodIP is the address of pod name in the default namespace.
func PodIP(t testing.TB, c *cluster.Cluster, name string) string {
	t.Helper()
	return strings.TrimSpace(c.MustKubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}"))
}

// ExecIn is kubectl exec into pod, "NAMESPACE/NAME" or a name in
// default.
//
// A command that ran reports its own failure ("command terminated with
// exit code N"). Right after the kubelet restarted a pod's container,
// kubectl exec sometimes exits 1 with no output at all, the command not
// run: that is a failure of the exec channel, not of the probe, and the
// exec is made again (at most 5 times).
func ExecIn(c *cluster.Cluster, pod string, cmd ...string) (string, error) {
	ns, name, ok := strings.Cut(pod, "/")
	if !ok {
		ns, name = "default", pod
	}
	for i := 0; ; i++ {
		out, err := c.Kubectl(append([]string{"-n", ns, "exec", name, "--"}, cmd...)...)
		if err == nil || strings.TrimSpace(out) != "" || i == 4 {
			return out, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Connects reports whether pod reaches ip:8080 (the probe pods' listener
// answers "ok") within a second.
func Connects(c *cluster.Cluster, pod, ip string) bool {
	out, err := ExecIn(c, pod, "nc", "-w", "1", ip, "8080")
	return err == nil && strings.TrimSpace(out) == "ok"
}

// Pings reports whether pod gets an echo reply from ip within a second.
func Pings(c *cluster.Cluster, pod, ip string) bool {
	_, err := ExecIn(c, pod, "ping", "-c", "1", "-W", "1", ip)
	return err == nil
}
