package egressvm

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// serviceEgress is TestOffloadServices' last part: NetworkPolicy egress
// of the client applies to its Service connections after the DNAT, as
// Kubernetes specifies. c (n1) is the client, a (n1) and b (n2) the
// ClusterIP's backends (b admits c; c admits nobody: the policies of
// the part before).
//   - c's egress allows only b (podSelector): every connection to the
//     ClusterIP is answered by b, never by a. kube-proxy's rules pick
//     a and b in turn; a SYN DNATed to a is dropped in n1's forward hook
//     (the node's stack enforces c's egress after the DNAT, its gateway
//     traffic having skipped the representor's egress rules), before
//     conntrack confirms it, so its retransmission is DNATed anew, to
//     b. Directly, c still reaches b and not a (the representor's
//     rules, pod to pod).
//   - c's egress allows only the ClusterIP's range (ipBlock): nothing
//     reaches a backend through it (after the DNAT the destination is
//     the backend, outside the block).
//
// ns is c's namespace, svc the ClusterIP, block the ClusterIP's range (in
// svc's family), ips the pods' addresses in that family.
func serviceEgress(t *testing.T, r *guest.Rig, ns, svc, block string, ips map[string]string, diag func() string) {
	apply := func(spec string) {
		t.Helper()
		file := filepath.Join(r.Dir, "c-egress.yaml")
		doc := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: c-egress, namespace: default}\nspec:" + spec
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r.Ctl.Must("policy", "apply", "-f", file)
	}
	asks := func() (got []string) {
		for range 4 {
			server, seen, err := testkit.Ask(ns, net.JoinHostPort(svc, "80"), 3*time.Second)
			switch {
			case err != nil:
				got = append(got, "-")
			case seen != ips["c"]:
				got = append(got, server+" seeing "+seen)
			default:
				got = append(got, server)
			}
		}
		return got
	}

	apply(`
  podSelector: {matchLabels: {app: c}}
  policyTypes: [Egress]
  egress:
  - to:
    - podSelector: {matchLabels: {app: b}}
`)
	testkit.Eventually(t, "c's egress allows b only", 30*time.Second, func() (bool, string) {
		_, _, errB := testkit.Ask(ns, net.JoinHostPort(ips["b"], "8080"), 3*time.Second)
		_, _, errA := testkit.Ask(ns, net.JoinHostPort(ips["a"], "8080"), 3*time.Second)
		return errB == nil && errA != nil, fmt.Sprintf("c -> b directly: %v; c -> a directly: %v", errB, errA)
	})
	if got := strings.Join(asks(), " "); got != "b b b b" {
		t.Errorf("c's egress allows only b: c -> Service %s answered by %q, want b every time (- is no answer)\n%s", svc, got, diag())
	} else {
		t.Logf("c's egress allows only b: c -> Service answered by %s", got)
	}

	apply(`
  podSelector: {matchLabels: {app: c}}
  policyTypes: [Egress]
  egress:
  - to:
    - ipBlock: {cidr: ` + block + `}
`)
	testkit.Eventually(t, "c's egress allows the Service range only", 30*time.Second, func() (bool, string) {
		_, _, errB := testkit.Ask(ns, net.JoinHostPort(ips["b"], "8080"), 3*time.Second)
		return errB != nil, fmt.Sprintf("c -> b directly: %v", errB)
	})
	if got := strings.Join(asks(), " "); got != "- - - -" {
		t.Errorf("c's egress allows only %s's range: c -> Service answered by %q, want no answer (- is none)\n%s", svc, got, diag())
	} else {
		t.Logf("c's egress allows only the Service range: c -> Service answered by none (%s)", got)
	}
	r.Ctl.Must("delete", "policy", "c-egress")
}
