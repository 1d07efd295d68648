package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestSkiffctl drives the real CLI against the real controller: creation,
// JSON output with the proto's field names, and bad input refused with the
// field and the reason while nothing is stored.
func TestSkiffctl(t *testing.T) {
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
	run("network", "create", "blue", "--vni", "100")
	run("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "192.0.2.0/30")
	out := run("endpoint", "create", "pod-a", "--network", "blue", "--node", "node1", "--label", "app=web", "-o", "json")
	var ep map[string]any
	if err := json.Unmarshal([]byte(out), &ep); err != nil {
		t.Fatalf("create -o json is not one JSON object: %v\n%s", err, out)
	}
	if ep["name"] != "pod-a" || ep["node"] != "node1" || ep["mac"] == nil || ep["ips"].([]any)[0] != "192.0.2.2/30" {
		t.Fatalf("created endpoint %v", ep)
	}

	snapshot := func() string {
		var all []string
		for _, k := range []string{"networks", "subnets", "endpoints", "nodes"} {
			all = append(all, run("get", k, "-o", "json"))
		}
		return strings.Join(all, "\n")
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(run("get", "networks", "-o", "json")), &list); err != nil || len(list) != 1 || list[0]["vni"] != float64(100) {
		t.Fatalf("get networks -o json: %v %v", list, err)
	}
	before := snapshot()

	bad := []struct {
		args []string
		want string
	}{
		{[]string{"network", "create", "red", "--vni", "0"}, "vni: must be 1..16777215, got 0"},
		{[]string{"network", "create", "red", "--vni", "16777216"}, "vni: must be 1..16777215, got 16777216"},
		{[]string{"network", "create", "red", "--vni", "100"}, `vni: 100 is already used by network "blue"`},
		{[]string{"network", "create", "red", "--vni", "x"}, "--vni"},
		{[]string{"network", "create", "red", "--vni", "300", "--egress", "nat"}, `egress: "nat" is not none, snat or routed`},
		{[]string{"subnet", "create", "s2", "--network", "blue", "--cidr", "192.0.2.0/33"}, "cidr: "},
		{[]string{"subnet", "create", "s2", "--network", "blue", "--cidr", "192.0.2.0/24"}, "cidr: 192.0.2.0/24 overlaps 192.0.2.0/30"},
		{[]string{"endpoint", "create", "e", "--network", "nope", "--node", "node1"}, `network: network "nope" does not exist`},
		{[]string{"endpoint", "create", "e", "--network", "blue", "--node", "Node_1"}, "node: "},
		{[]string{"endpoint", "create", "e", "--network", "blue", "--node", "node1"}, "ips: no free address left"},
		{[]string{"endpoint", "create", "e", "--network", "blue", "--node", "node1", "--label", "novalue"}, "--label"},
		{[]string{"delete", "network", "blue"}, "still has 1 endpoint(s) (pod-a)"},
		{[]string{"get", "things"}, "unknown kind"},
	}
	for _, b := range bad {
		out, errOut, err := skiffctl(addr, b.args...)
		if err == nil {
			t.Errorf("skiffctl %v succeeded: %s", b.args, out)
			continue
		}
		if !strings.Contains(errOut, b.want) {
			t.Errorf("skiffctl %v: stderr %q does not say %q", b.args, errOut, b.want)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("refused commands changed the store:\nbefore %s\nafter %s", before, after)
	}

	run("delete", "endpoint", "pod-a")
	run("delete", "network", "blue")
	if out := run("get", "networks", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("after delete: %s", out)
	}
	_, errOut, err := skiffctl("127.0.0.1:1", "get", "nodes")
	if err == nil || !strings.Contains(errOut, "127.0.0.1:1 is not reachable") {
		t.Fatalf("unreachable controller: %v %q", err, errOut)
	}
}
