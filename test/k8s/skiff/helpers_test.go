package skiff

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// skiffctl runs skiffctl inside the controller's pod, as an operator with
// a certificate of the controller's CA (the controller's own, which is
// not a node's).
func skiffctl(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	ip := strings.TrimSpace(c.MustKubectl(t, "-n", "skiff-system", "get", "pod", "skiff-controller-0", "-o", "jsonpath={.status.podIP}"))
	base := []string{"-n", "skiff-system", "exec", "skiff-controller-0", "--", "/usr/local/bin/skiffctl", "--controller", ip + ":7400",
		"--tls-ca", "/var/lib/skiff/ca/ca.pem", "--tls-cert", "/var/lib/skiff/ca/server.pem", "--tls-key", "/var/lib/skiff/ca/server-key.pem"}
	return c.MustKubectl(t, append(base, args...)...)
}

type endpoint struct {
	Name, Node, Owner, Namespace string
	Ips                          []string
	Labels                       map[string]string
}

// endpoints lists Skiff's endpoints, from the controller.
func endpoints(t *testing.T, c *cluster.Cluster) []endpoint {
	t.Helper()
	out := skiffctl(t, c, "get", "endpoints", "-o", "json")
	var eps []endpoint
	if strings.TrimSpace(out) == "" || strings.TrimSpace(out) == "null" {
		return nil
	}
	if err := json.Unmarshal([]byte(out), &eps); err != nil {
		var w struct{ Endpoints []endpoint }
		if err2 := json.Unmarshal([]byte(out), &w); err2 != nil {
			t.Fatalf("skiffctl get endpoints: %v\n%s", err, out)
		}
		eps = w.Endpoints
	}
	return eps
}

// execIn is kubectl exec into pod, "NAMESPACE/NAME" or a name in
// default.
//
// A command that ran reports its own failure ("command terminated with
// exit code N"). Right after the kubelet restarted a pod's container,
// kubectl exec sometimes exits 1 with no output at all, the command not
// run: that is a failure of the exec channel, not of the probe, and the
// exec is made again (at most 5 times).
func execIn(c *cluster.Cluster, pod string, cmd ...string) (string, error) {
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

// connects reports whether pod reaches ip:8080 (the probe pods' listener
// answers "ok") within a second.
func connects(c *cluster.Cluster, pod, ip string) bool {
	out, err := execIn(c, pod, "nc", "-w", "1", ip, "8080")
	return err == nil && strings.TrimSpace(out) == "ok"
}

// pings reports whether pod gets an echo reply from ip within a second.
func pings(c *cluster.Cluster, pod, ip string) bool {
	_, err := execIn(c, pod, "ping", "-c", "1", "-W", "1", ip)
	return err == nil
}

// eventually retries f until it returns "" or within passes.
func eventually(t *testing.T, within time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		why := f()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentErrors returns the ERROR lines the agents logged.
func agentErrors(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "daemonset/skiff-agent", "--timeout=2m")
	out := c.MustKubectl(t, "-n", "skiff-system", "logs", "-l", "app.kubernetes.io/name=skiff-agent", "-c", "agent", "--tail=-1", "--prefix")
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	return errs
}
