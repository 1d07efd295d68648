package skiff

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// The helpers shared with make demo-k8s live in probe.go.
var (
	skiffctl = Skiffctl
	execIn   = ExecIn
	connects = Connects
	pings    = Pings
	probePod = ProbePod
	podIP    = PodIP
)

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
