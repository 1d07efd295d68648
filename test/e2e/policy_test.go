package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestPolicyEnforcedAcrossNodes applies a Kubernetes NetworkPolicy with
// skiffctl and checks with real TCP and ICMP between pods (made by the CNI
// plugin) on two nodes that exactly what it allows passes.
func TestPolicyEnforcedAcrossNodes(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	type pod struct{ ns, ip string }
	add := func(id, node, app string) pod {
		t.Helper()
		ns := testns.New(t)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"labels":{"app":%q}}`, c.nodes[node].socket, app)
		eventually(t, func() error { _, err := cniRun("STATUS", "", "", "", conf); return err })
		if _, err := cniRun("ADD", id, testns.Path(ns), "eth0", conf); err != nil {
			t.Fatal(err)
		}
		return pod{ns, firstIPv4T(t, ns)}
	}
	web, other, db := add("web", "n1", "web"), add("other", "n1", "other"), add("db", "n2", "db")
	listenIn(t, db.ns, db.ip+":5201")
	tcp := func(from pod) bool { return connects(from.ns, db.ip, "5201") }
	ping := func(from, to pod) bool {
		_, err := testns.Try(from.ns, "ping", "-c", "1", "-W", "1", to.ip)
		return err == nil
	}
	eventually(t, func() error {
		if !tcp(web) || !tcp(other) {
			return fmt.Errorf("no TCP to db before any policy")
		}
		return nil
	})
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 5201}]
`), 0o600)
	start := time.Now()
	c.mustCtl("policy", "apply", "-f", file)
	eventually(t, func() error {
		if tcp(other) {
			return fmt.Errorf("other still reaches db")
		}
		return nil
	})
	t.Logf("policy applied -> enforced on the other node in %v", time.Since(start))
	checks := []struct {
		name      string
		got, want bool
	}{
		{"web -> db TCP 5201 (allowed)", tcp(web), true},
		{"other -> db TCP 5201 (not selected)", tcp(other), false},
		{"web -> db ICMP (port not allowed)", ping(web, db), false},
		{"db -> web ICMP (web not isolated)", ping(db, web), true},
		{"web -> other ICMP (same node, neither isolated)", ping(web, other), true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: reachable=%v, want %v", ch.name, ch.got, ch.want)
		}
	}
	c.mustCtl("delete", "policy", "default/db-from-web")
	eventually(t, func() error {
		if !tcp(other) || !ping(web, db) {
			return fmt.Errorf("isolation not lifted after the policy was deleted")
		}
		return nil
	})
}

func firstIPv4T(t *testing.T, ns string) string {
	out := testns.Run(t, ns, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	f := strings.Fields(out)
	for i, w := range f {
		if w == "inet" {
			return strings.Split(f[i+1], "/")[0]
		}
	}
	t.Fatalf("no IPv4 address in %s", ns)
	return ""
}
