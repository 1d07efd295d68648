package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestOwnerLabelsMovePolicy: pods made by the CNI plugin take their labels
// from their owner records (what the Kubernetes adapter sets), and a
// change of a record's labels, or of a namespace's, moves the pod in or out
// of a NetworkPolicy, checked with real TCP across nodes. The time from
// the change to the first probe that sees it is logged.
func TestOwnerLabelsMovePolicy(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	type pod struct{ ns, ip string }
	add := func(id, node, nsName string) pod {
		t.Helper()
		ns := testkit.New(t)
		conf := cniConf("blue", c.nodes[node].socket, "1.1.0") // its labels (app=web) lose to the record's
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
		if _, err := cniRunAs(nsName, id, "ADD", testkit.Path(ns), conf); err != nil {
			t.Fatal(err)
		}
		return pod{ns, firstIPv4(t, ns)}
	}
	// The client's record comes before its ADD; the db's after.
	c.mustCtl("owner", "set", "pod:shop/client", "--label", "app=other")
	client, db := add("client", "n1", "shop"), add("db", "n2", "shop")
	c.mustCtl("owner", "set", "pod:shop/db", "--label", "app=db")
	testkit.Serve(t, db.ns, db.ip+":5201", "ok")
	tcp := func() bool { return testkit.Connects(client.ns, net.JoinHostPort(db.ip, "5201"), time.Second) }
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}, {namespaceSelector: {matchLabels: {team: ops}}}]
    ports: [{protocol: TCP, port: 5201}]
`), 0o600)
	c.mustCtl("policy", "apply", "-f", file)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if tcp() {
			return fmt.Errorf("the client (app=other) reaches the db")
		}
		return nil
	}))
	change := func(what string, want bool, args ...string) {
		t.Helper()
		start := time.Now()
		c.mustCtl(args...)
		took, ok := firstSeen(tcp, want, start, 20*time.Second)
		if !ok {
			t.Fatalf("%s: the client reaches the db: %v, want %v", what, !want, want)
		}
		t.Logf("%s: enforced within %v of skiffctl's start", what, took)
	}
	change("client labelled app=web", true, "owner", "set", "pod:shop/client", "--label", "app=web")
	change("client labelled app=other", false, "owner", "set", "pod:shop/client", "--label", "app=other")
	change("namespace shop labelled team=ops", true, "namespace", "label", "shop", "team=ops")
	change("namespace label team removed", false, "namespace", "label", "shop", "team-")
}

// cniRunAs runs the plugin for a pod named id in namespace ns.
func cniRunAs(ns, id, command, netns, conf string) (string, error) {
	return cniRunArgs(command, id, netns, "eth0", conf, "IgnoreUnknown=1;K8S_POD_NAMESPACE="+ns+";K8S_POD_NAME="+id)
}

// firstSeen starts probe every 25 ms (a blocked TCP probe takes its whole
// timeout, so probes overlap) until one returns want, and returns when the
// earliest probe that saw want had started, from since: an upper bound of
// when the change took effect, within 25 ms.
func firstSeen(probe func() bool, want bool, since time.Time, limit time.Duration) (time.Duration, bool) {
	start := since
	type res struct {
		at time.Duration
		ok bool
	}
	results := make(chan res, 1024)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	best, found, running := time.Duration(-1), false, 0
	for {
		select {
		case <-tick.C:
			if !found && time.Since(start) < limit {
				at := time.Since(start)
				running++
				go func() { results <- res{at, probe() == want} }()
			}
		case r := <-results:
			running--
			if r.ok && (best < 0 || r.at < best) {
				best, found = r.at, true
			}
		}
		if (found || time.Since(start) >= limit) && running == 0 {
			return best, found
		}
	}
}
