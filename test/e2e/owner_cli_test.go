package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestOwnerRecords drives owner records through the real CLI and
// controller: an endpoint made before its owner's record and one made
// after both carry the record's labels, follow its changes, show their
// owner in the endpoint table, and go with the record when it is deleted
// with its endpoints; bad records are refused naming the field.
func TestOwnerRecords(t *testing.T) {
	addr := testkit.FreeAddr(t)
	startController(t, addr, "--data-dir", t.TempDir())
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := skiffctl(addr, args...)
		if err != nil {
			t.Fatalf("skiffctl %v: %v\n%s", args, err, errOut)
		}
		return out
	}
	labels := func(ep string) string {
		t.Helper()
		var e struct {
			Labels    map[string]string `json:"labels"`
			Namespace string            `json:"namespace"`
		}
		if err := json.Unmarshal([]byte(run("get", "endpoint", ep, "-o", "json")), &e); err != nil {
			t.Fatal(err)
		}
		return e.Namespace + " " + labelList(e.Labels)
	}
	run("network", "create", "blue", "--vni", "100")
	run("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	run("endpoint", "create", "early", "--network", "blue", "--node", "node1", "--owner", "pod:shop/web-1", "--namespace", "shop", "--label", "from=cni")
	run("owner", "set", "pod:shop/web-1", "--label", "app=web", "--uid", "u-1", "--node", "node1")
	run("endpoint", "create", "late", "--network", "blue", "--node", "node1", "--owner", "pod:shop/web-1", "--namespace", "shop")
	for _, ep := range []string{"early", "late"} {
		if got := labels(ep); got != "shop app=web" {
			t.Errorf("%s: %s, want the record's", ep, got)
		}
	}
	run("owner", "set", "pod:shop/web-1", "--label", "app=web", "--label", "tier=front", "--uid", "u-1", "--node", "node1")
	if got := labels("early"); got != "shop app=web,tier=front" {
		t.Errorf("after the change: %s", got)
	}
	table := run("get", "endpoints")
	if !strings.Contains(strings.Split(table, "\n")[0], "OWNER") || !strings.Contains(table, "pod:shop/web-1") {
		t.Errorf("the endpoint table shows no owner:\n%s", table)
	}
	if owners := run("get", "owners", "--node", "node1"); !strings.Contains(owners, "pod:shop/web-1  shop") || !strings.Contains(owners, "app=web,tier=front") {
		t.Errorf("get owners:\n%s", owners)
	}
	for _, b := range []struct {
		args []string
		want string
	}{
		{[]string{"owner", "set", "web-1"}, "name: \"web-1\" is not KIND:ID"},
		{[]string{"owner", "set", "pod:shop/web-1", "--namespace", "prod"}, `namespace: "prod" is not the pod's namespace "shop"`},
		{[]string{"owner", "set", "pod:shop/web-1", "--label", "app=a b"}, "labels: "},
		{[]string{"delete", "owner", "pod:shop/web-1", "--uid", "u-2", "--endpoints"}, `uid: owner "pod:shop/web-1" is now uid "u-1"`},
		{[]string{"delete", "endpoints"}, "--node NODE or --owner OWNER"},
	} {
		before := labels("early") + run("get", "owners", "-o", "json") + run("get", "endpoints", "-o", "json")
		out, errOut, err := skiffctl(addr, b.args...)
		if err == nil || !strings.Contains(errOut, b.want) {
			t.Errorf("skiffctl %v: %v %s%s, want an error saying %q", b.args, err, out, errOut, b.want)
		}
		if after := labels("early") + run("get", "owners", "-o", "json") + run("get", "endpoints", "-o", "json"); after != before {
			t.Errorf("skiffctl %v changed the store", b.args)
		}
	}
	out := run("delete", "owner", "pod:shop/web-1", "--uid", "u-1", "--endpoints")
	if !strings.Contains(out, "endpoint/early deleted") || !strings.Contains(out, "endpoint/late deleted") {
		t.Errorf("delete owner --endpoints said:\n%s", out)
	}
	if eps := run("get", "endpoints", "-o", "json"); strings.TrimSpace(eps) != "[]" {
		t.Errorf("endpoints left: %s", eps)
	}
	run("endpoint", "create", "x1", "--network", "blue", "--node", "node2")
	run("endpoint", "create", "x2", "--network", "blue", "--node", "node3")
	if out := run("delete", "endpoints", "--node", "node2"); strings.TrimSpace(out) != "endpoint/x1 deleted" {
		t.Errorf("delete endpoints --node node2: %s", out)
	}
	run("delete", "endpoint", "x2")
	run("delete", "network", "blue") // refused if an address were left
}

func labelList(l map[string]string) string {
	var out []string
	for k, v := range l {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
