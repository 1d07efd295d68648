package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

const twoPolicies = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: db-from-web
  namespace: shop
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 5432}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-all
spec:
  podSelector: {}
  policyTypes: [Ingress]
`

// TestPolicyObjects applies Kubernetes NetworkPolicy YAML through the real
// skiffctl: several documents at once, all or none, listed with the
// proto's field names, namespaces labeled, policies deleted.
func TestPolicyObjects(t *testing.T) {
	addr := testkit.FreeAddr(t)
	startController(t, addr, "--data-dir", t.TempDir())
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := skiffctl(addr, args...)
		if err != nil {
			t.Fatalf("skiffctl %v: %v\n%s", args, err, errOut)
		}
		return out
	}
	out := run("policy", "apply", "-f", write("ok.yaml", twoPolicies))
	if !strings.Contains(out, "policy/shop/db-from-web applied") || !strings.Contains(out, "policy/default/deny-all applied") {
		t.Fatalf("apply printed %q", out)
	}
	var pols []struct {
		Namespace, Name, Document string
	}
	if err := json.Unmarshal([]byte(run("get", "policies", "-o", "json")), &pols); err != nil || len(pols) != 2 {
		t.Fatalf("get policies: %v %v", pols, err)
	}
	if !strings.Contains(pols[1].Document, `"port":5432`) && !strings.Contains(pols[0].Document, `"port":5432`) {
		t.Fatalf("stored documents lost the port: %+v", pols)
	}
	before := run("get", "policies", "-o", "json")
	bad := strings.Replace(twoPolicies, "port: 5432", "port: postgres", 1) + "---\n" + strings.Replace(twoPolicies[:strings.Index(twoPolicies, "---")], "db-from-web", "new-one", 1)
	_, errOut, err := skiffctl(addr, "policy", "apply", "-f", write("bad.yaml", bad))
	if err == nil || !strings.Contains(errOut, `spec.ingress[0].ports[0].port: "postgres": named ports are not supported`) {
		t.Fatalf("bad apply: %v %q", err, errOut)
	}
	if after := run("get", "policies", "-o", "json"); after != before {
		t.Fatalf("a refused apply changed the stored policies:\n%s\n%s", before, after)
	}
	run("namespace", "label", "shop", "team=shop", "tier=gold")
	run("namespace", "label", "shop", "tier-")
	if out := run("get", "namespaces"); !strings.Contains(out, "team=shop") || strings.Contains(out, "tier") {
		t.Fatalf("namespaces: %s", out)
	}
	run("delete", "policy", "shop/db-from-web")
	if out := run("get", "policies"); strings.Contains(out, "db-from-web") || !strings.Contains(out, "deny-all") {
		t.Fatalf("after delete: %s", out)
	}
	if _, errOut, err := skiffctl(addr, "delete", "policy", "shop/db-from-web"); err == nil || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("deleting a missing policy: %v %q", err, errOut)
	}
}
