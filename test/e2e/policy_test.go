package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/cni"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestPolicyEnforcedAcrossNodes applies a Kubernetes NetworkPolicy with
// skiffctl and checks with real TCP and ICMP between pods (made by the CNI
// plugin) on two nodes that exactly what it allows passes.
func TestPolicyEnforcedAcrossNodes(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	type pod struct{ ns, ip string }
	add := func(id, node, app string) pod {
		t.Helper()
		ns := testkit.New(t)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"labels":{"app":%q}}`, c.nodes[node].socket, app)
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
		if _, err := cniRun("ADD", id, testkit.Path(ns), "eth0", conf); err != nil {
			t.Fatal(err)
		}
		return pod{ns, firstIPv4(t, ns)}
	}
	web, other, db := add("web", "n1", "web"), add("other", "n1", "other"), add("db", "n2", "db")
	testkit.Serve(t, db.ns, db.ip+":5201", "ok")
	tcp := func(from pod) bool { return testkit.Connects(from.ns, net.JoinHostPort(db.ip, "5201"), time.Second) }
	ping := func(from, to pod) bool {
		err := testkit.Ping(from.ns, to.ip, 1, time.Second)
		return err == nil
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !tcp(web) || !tcp(other) {
			return fmt.Errorf("no TCP to db before any policy")
		}
		return nil
	}))
	// Bad policies are refused with the field and the reason, all or
	// none: a good document beside a bad one is not applied either.
	good := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: good, namespace: default}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n---\n"
	for _, bad := range []struct{ spec, want string }{
		{`{podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 198.51.100.0/33}}]}]}`, "ipBlock.cidr"},
		{`{podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 198.51.100.0/24, except: [203.0.113.0/28]}}]}]}`, "is not inside"},
		{`{podSelector: {}, ingress: [{ports: [{port: 0}]}]}`, "port: 0 is not 1..65535"},
		{`{podSelector: {}, ingress: [{ports: [{port: 70000}]}]}`, "port: 70000 is not 1..65535"},
		{`{podSelector: {}, ingress: [{ports: [{port: 90, endPort: 80}]}]}`, "endPort: 80 must be >= port 90"},
		{`{podSelector: {}, ingress: [{ports: [{protocol: ICMP, port: 1}]}]}`, "protocol: \"ICMP\" is not TCP, UDP or SCTP"},
		{`{podSelector: {matchExpressions: [{key: app, operator: Sometimes}]}}`, "spec.podSelector"},
	} {
		f := filepath.Join(t.TempDir(), "bad.yaml")
		os.WriteFile(f, []byte(good+"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: bad, namespace: default}\nspec: "+bad.spec+"\n"), 0o600)
		out, err := c.ctl("policy", "apply", "-f", f)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("bad policy %s: err %v, output %q; want an error with %q", bad.spec, err, out, bad.want)
		}
	}
	if out := c.mustCtl("get", "policies"); strings.Contains(out, "good") || strings.Contains(out, "bad") {
		t.Fatalf("refused policies were stored:\n%s", out)
	}
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
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if tcp(other) {
			return fmt.Errorf("other still reaches db")
		}
		return nil
	}))
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
	// skiffctl policy explain agrees with what the packets did, and says
	// which rule decided.
	for _, x := range []struct {
		src, dst, flow string
		measured       bool
		want           string
	}{
		{"web", "db", "5201/tcp", tcp(web), "default/db-from-web ingress[0]"},
		{"other", "db", "5201/tcp", tcp(other), "no rule allows it"},
		{"web", "db", "icmp", ping(web, db), "no rule allows it"},
		{"db", "web", "icmp", ping(db, web), "not isolated"},
	} {
		out := c.mustCtl("policy", "explain", cni.EndpointName(x.src, "eth0"), cni.EndpointName(x.dst, "eth0"), x.flow)
		if strings.HasPrefix(out, "ALLOWED") != x.measured || !strings.Contains(out, x.want) {
			t.Errorf("explain %s -> %s %s (packets passed: %v):\n%s", x.src, x.dst, x.flow, x.measured, out)
		}
	}
	if out, err := c.ctl("policy", "explain", cni.EndpointName("web", "eth0"), "203.0.113.9", "80/xyz"); err == nil || !strings.Contains(out, "protocol") {
		t.Errorf("explain with a bad protocol: %v\n%s", err, out)
	}
	// Visibility: db's rules counted what they allowed and dropped, in
	// skiffctl and in the agent's metrics.
	dbName := cni.EndpointName("db", "eth0")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		var ep struct {
			PolicyCounters []struct {
				Direction, Verdict string
				Rule               int
				Packets            string
			} `json:"policyCounters"`
		}
		if err := json.Unmarshal([]byte(c.mustCtl("get", "endpoint", dbName, "-o", "json")), &ep); err != nil {
			return err
		}
		var allow, drop bool
		for _, pc := range ep.PolicyCounters {
			allow = allow || (pc.Direction == "ingress" && pc.Rule == 0 && pc.Verdict == "allow" && pc.Packets != "" && pc.Packets != "0")
			drop = drop || (pc.Direction == "ingress" && pc.Rule == -1 && pc.Verdict == "drop" && pc.Packets != "" && pc.Packets != "0")
		}
		if !allow || !drop {
			return fmt.Errorf("db's policy counters lack allowed and dropped packets: %+v", ep.PolicyCounters)
		}
		return nil
	}))
	metric := func(node, name string) int {
		out := testkit.Run(t, c.ul, "curl", "-sf", "http://"+c.nodes[node].ip+":9100/metrics")
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, name+" ") {
				n, _ := strconv.Atoi(strings.Fields(l)[1])
				return n
			}
		}
		return -1
	}
	if m := metric("n2", `skiff_agent_policy_packets_total{direction="ingress",endpoint="`+dbName+`",rule="-1",verdict="drop"}`); m <= 0 {
		t.Errorf("n2's metrics show %d dropped packets for db", m)
	}
	// Minimal updates: a new web pod on n1 joins the group db's rule
	// refers to. n2 adds exactly one set element and rewrites no rule;
	// n1 and n3 hold no isolated endpoint and write nothing to a policy.
	elems := func(n string) int { return metric(n, `skiff_agent_policy_writes_total{kind="element"}`) }
	tables := func(n string) int { return metric(n, `skiff_agent_policy_writes_total{kind="table"}`) }
	e2, t2, t1 := elems("n2"), tables("n2"), tables("n1")
	web2 := add("web2", "n1", "web")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !tcp(web2) {
			return fmt.Errorf("the new web pod does not reach db")
		}
		return nil
	}))
	if d := elems("n2") - e2; d != 1 {
		t.Errorf("n2 changed %d set elements for one new group member; want 1", d)
	}
	if d := tables("n2") - t2; d != 0 {
		t.Errorf("n2 rewrote its policy table %d times for a group change; want 0", d)
	}
	if tables("n1") != t1 || elems("n1") != 0 {
		t.Errorf("n1, which isolates nothing, wrote to the policy table")
	}
	// Restart without churn: n2's agent killed, the policy holds (web
	// in, other out) while it is down, and the restarted agent, once it
	// has applied its plan, has written nothing to the policy table.
	stop(c.nodes["n2"].agent)
	if !tcp(web) || tcp(other) {
		t.Errorf("with n2's agent down: web reaches db %v (want true), other %v (want false)", tcp(web), tcp(other))
	}
	c.startAgent("n2")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if out, err := testkit.Try(c.ul, "curl", "-sf", "http://"+c.nodes["n2"].ip+":9100/healthz"); err != nil || strings.TrimSpace(out) != "ok" {
			return fmt.Errorf("n2's agent not healthy: %v %q", err, out)
		}
		return nil
	}))
	if tb, el := tables("n2"), elems("n2"); tb != 0 || el != 0 {
		t.Errorf("the restarted agent wrote to the policy table: %d table rewrites, %d set elements; want none", tb, el)
	}
	if !tcp(web) || tcp(other) {
		t.Errorf("after n2's agent restarted: web reaches db %v (want true), other %v (want false)", tcp(web), tcp(other))
	}
	c.mustCtl("delete", "policy", "default/db-from-web")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !tcp(other) || !ping(web, db) {
			return fmt.Errorf("isolation not lifted after the policy was deleted")
		}
		return nil
	}))
	// A namespace label change: db admits the namespaces labelled
	// env=trusted; labelling "default" lets web in, unlabelling shuts it
	// out again. The time is from the skiffctl call to the first
	// connection that passes (probes are 1 s apart at most).
	os.WriteFile(file, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-trusted, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: trusted}}}]}]
`), 0o600)
	c.mustCtl("policy", "apply", "-f", file)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if tcp(web) {
			return fmt.Errorf("web reaches db before its namespace is trusted")
		}
		return nil
	}))
	start = time.Now()
	c.mustCtl("namespace", "label", "default", "env=trusted")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !tcp(web) {
			return fmt.Errorf("web does not reach db after its namespace was labelled")
		}
		return nil
	}))
	t.Logf("namespace label -> enforced: %v", time.Since(start))
	c.mustCtl("namespace", "label", "default", "env-")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if tcp(web) {
			return fmt.Errorf("web still reaches db after the label was removed")
		}
		return nil
	}))
}
