package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestEgressIPBlock: NetworkPolicy egress rules still apply to traffic
// that leaves the cluster through a snat network. A pod selected by a
// policy allowing egress only to 203.0.113.0/24 except 203.0.113.200
// reaches 203.0.113.201 outside and not 203.0.113.200, while a pod the
// policy does not select reaches both; the policy is matched on the pod's
// own address, before the node masquerades it. Deleting the policy lets
// the selected pod out again.
func TestEgressIPBlock(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/24")
	const denied, allowed = "203.0.113.200", "203.0.113.201"
	for _, a := range []string{denied, allowed} {
		testkit.Run(t, c.ul, "ip", "addr", "add", a+"/32", "dev", "lo")
		for _, n := range c.nodes {
			testkit.Run(t, n.ns, "ip", "route", "add", a+"/32", "via", "192.0.2.254")
		}
	}
	c.waitCNI(t, "pods")
	add := func(id, node, app string) string {
		t.Helper()
		ns := testkit.New(t)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"skiff-cni","network":"pods","socket":%q,"labels":{"app":%q}}`, c.nodes[node].socket, app)
		if _, err := cniRun("ADD", id, testkit.Path(ns), "eth0", conf); err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		return ns
	}
	web, other := add("web", "n1", "web"), add("other", "n2", "other")
	reaches := func(ns, addr string) bool {
		err := testkit.Ping(ns, addr, 1, time.Second)
		return err == nil
	}
	for _, ns := range []string{web, other} {
		for _, a := range []string{denied, allowed} {
			if !reaches(ns, a) {
				t.Fatalf("before any policy, a snat pod cannot reach %s outside", a)
			}
		}
	}

	file := filepath.Join(t.TempDir(), "egress.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-out, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.200/32]}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mustCtl("policy", "apply", "-f", file)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if reaches(web, denied) {
			return fmt.Errorf("web still reaches %s, which its egress policy excepts", denied)
		}
		return nil
	}))
	for _, ch := range []struct {
		name      string
		got, want bool
	}{
		{"web -> " + allowed + " (inside the ipBlock)", reaches(web, allowed), true},
		{"web -> " + denied + " (excepted)", reaches(web, denied), false},
		{"other -> " + denied + " (not selected)", reaches(other, denied), true},
	} {
		if ch.got != ch.want {
			t.Errorf("%s: reachable=%v, want %v", ch.name, ch.got, ch.want)
		}
	}

	c.mustCtl("delete", "policy", "default/web-out")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !reaches(web, denied) {
			return fmt.Errorf("web does not reach %s after its policy was deleted", denied)
		}
		return nil
	}))
}
