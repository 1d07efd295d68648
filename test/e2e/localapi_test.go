package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestLocalAPIAndTraffic plumbs pods (namespaces) through each agent's
// local API and checks real traffic: same network across nodes passes over
// VXLAN, different networks are isolated; counters reach the controller;
// bad requests leave nothing behind; delete removes everything.
func TestLocalAPIAndTraffic(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	c.mustCtl("network", "create", "red", "--vni", "200")
	c.mustCtl("subnet", "create", "red-v4", "--network", "red", "--cidr", "203.0.113.0/24")
	ctx := context.Background()
	for _, n := range c.nodes {
		st, err := os.Stat(n.socket)
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { st, err = os.Stat(n.socket); return err }))
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s socket mode %v, want 0600", n.name, st.Mode().Perm())
		}
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			s, err := localapi.NewClient(n.socket).Status(ctx)
			if err != nil || !s.Ready {
				return fmt.Errorf("%s not ready: %+v %v", n.name, s, err)
			}
			return nil
		}))
	}
	type pod struct {
		ns   string
		resp *localapi.CreateResponse
	}
	pods := map[string]*pod{}
	add := func(name, network, nodeName string) *pod {
		t.Helper()
		p := &pod{ns: testkit.New(t)}
		r, err := localapi.NewClient(c.nodes[nodeName].socket).Create(ctx, localapi.CreateRequest{
			Name: name, Network: network, NetNS: testkit.Path(p.ns), IfName: "eth0", Labels: map[string]string{"app": name}})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		p.resp = r
		pods[name] = p
		return p
	}
	pa := add("pa", "blue", "n1")
	pb := add("pb", "blue", "n2")
	pc := add("pc", "red", "n3")
	add("pd", "red", "n1")
	if len(pa.resp.IPs) != 1 || pa.resp.Gateways[0] != "198.51.100.1" || pa.resp.MTU != 1450 {
		t.Fatalf("create response %+v", pa.resp)
	}
	if out := testkit.Run(t, pa.ns, "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, pa.resp.IPs[0]) {
		t.Fatalf("pod address missing: %s", out)
	}
	if out := testkit.Run(t, pa.ns, "ip", "route", "show", "default"); !strings.Contains(out, "via 198.51.100.1 dev eth0") {
		t.Fatalf("pod default route: %s", out)
	}
	ipOf := func(p *pod) string { return strings.Split(p.resp.IPs[0], "/")[0] }

	// Same network across nodes: reachable, over VXLAN.
	testkit.MustPing(t, pa.ns, ipOf(pb), 3, 2*time.Second)
	testkit.MustPing(t, pb.ns, ipOf(pa), 2, 2*time.Second)
	// Different networks: isolated.
	if out, err := testkit.Try(pa.ns, "ping", "-c", "2", "-W", "1", ipOf(pc)); err == nil {
		t.Fatalf("blue pod reached a red pod:\n%s", out)
	}
	// Counters reach the controller.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		var eps []struct {
			Name     string `json:"name"`
			Counters struct {
				TxPackets string `json:"txPackets"`
			} `json:"counters"`
		}
		if err := json.Unmarshal([]byte(c.mustCtl("get", "endpoints", "-o", "json")), &eps); err != nil {
			return err
		}
		for _, e := range eps {
			if e.Name == "pa" && e.Counters.TxPackets != "" && e.Counters.TxPackets != "0" {
				return nil
			}
		}
		return fmt.Errorf("no counters for pa yet: %+v", eps)
	}))

	// The controller dies: established forwarding goes on.
	stop(c.ctrl)
	testkit.MustPing(t, pa.ns, ipOf(pb), 2, 2*time.Second)
	c.startController()
	for _, n := range c.nodes {
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			s, err := localapi.NewClient(n.socket).Status(ctx)
			if err != nil || !s.Ready {
				return fmt.Errorf("%s not back: %+v %v", n.name, s, err)
			}
			return nil
		}))
	}

	// Bad requests are refused and leave nothing behind.
	cl := localapi.NewClient(c.nodes["n1"].socket)
	before := testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show")
	for _, bad := range []struct {
		req  localapi.CreateRequest
		code string
	}{
		{localapi.CreateRequest{Name: "x1", Network: "nope", NetNS: testkit.Path(pa.ns), IfName: "eth1"}, "not-found"},
		{localapi.CreateRequest{Name: "x2", Network: "blue", NetNS: testkit.Path(pa.ns), IfName: "this-name-is-too-long"}, "invalid"},
		{localapi.CreateRequest{Name: "x3", Network: "blue", NetNS: "/nonexistent", IfName: "eth1"}, "invalid"},
		{localapi.CreateRequest{Name: "pa", Network: "blue", NetNS: testkit.Path(pa.ns), IfName: "eth1"}, "exists"},
	} {
		_, err := cl.Create(ctx, bad.req)
		var le *localapi.Error
		if !errors.As(err, &le) || le.Code != bad.code {
			t.Errorf("create %+v: %v, want code %s", bad.req, err, bad.code)
		}
	}
	if after := testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show"); linkNames(after) != linkNames(before) {
		t.Fatalf("refused requests changed n1's links:\n%s\n%s", before, after)
	}
	if out := c.mustCtl("get", "endpoints"); strings.Contains(out, "x1") || strings.Contains(out, "x2") || strings.Contains(out, "x3") {
		t.Fatalf("refused requests left endpoints:\n%s", out)
	}

	// Delete: the interface, the endpoint and its FDB entry on n2 go; a
	// second delete succeeds.
	if err := cl.Delete(ctx, "pa"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, "pa"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if out, _ := testkit.Try(pa.ns, "ip", "link", "show", "eth0"); !strings.Contains(out, "does not exist") {
		t.Fatalf("pod interface still there: %s", out)
	}
	if strings.Contains(c.mustCtl("get", "endpoints"), "pa ") {
		t.Fatal("endpoint pa still stored")
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if f := c.fdb("n2", 100); strings.Contains(f, pa.resp.MAC) {
			return fmt.Errorf("n2 still forwards pa's MAC: %s", f)
		}
		return nil
	}))
}

func linkNames(ipLinkOutput string) string {
	var names []string
	for _, l := range strings.Split(ipLinkOutput, "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.Split(f[1], "@")[0])
		}
	}
	return strings.Join(names, " ")
}
