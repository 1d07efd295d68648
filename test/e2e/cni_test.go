package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// cniRun executes skiff-cni exactly as a runtime does: CNI_* in the
// environment, the configuration on stdin. It returns stdout and the error.
func cniRun(command, containerID, netns, ifName, conf string) (string, error) {
	return cniRunArgs(command, containerID, netns, ifName, conf, "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="+containerID)
}

// cniRunArgs is cniRun with the CNI_ARGS given.
func cniRunArgs(command, containerID, netns, ifName, conf, args string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "skiff-cni"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+ifName, "CNI_PATH="+binDir, "CNI_ARGS="+args)
	cmd.Stdin = strings.NewReader(conf)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%v: %s%s", err, out.String(), errb.String())
	}
	return out.String(), nil
}

func cniConf(network, socket, version string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"skiff-cni","network":%q,"socket":%q,"labels":{"app":"web"}}`, version, network, network, socket)
}

type cniResult struct {
	Interfaces []struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Interface *int   `json:"interface"`
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
}

func TestCNIPlugin(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	c.mustCtl("network", "create", "red", "--vni", "200")
	c.mustCtl("subnet", "create", "red-v4", "--network", "red", "--cidr", "203.0.113.0/24")
	sock := func(n string) string { return c.nodes[n].socket }
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		for n := range c.nodes {
			if _, err := cniRun("STATUS", "", "", "", cniConf("blue", sock(n), "1.1.0")); err != nil {
				return err
			}
		}
		return nil
	}))

	type pod struct {
		id, ns, conf, ip, mac, out string
	}
	add := func(id, network, node, version string) *pod {
		t.Helper()
		p := &pod{id: id, ns: testkit.New(t), conf: cniConf(network, sock(node), version)}
		out, err := cniRun("ADD", id, testkit.Path(p.ns), "eth0", p.conf)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		var r cniResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("ADD %s printed %q: %v", id, out, err)
		}
		if version != "0.4.0" {
			if len(r.Interfaces) != 2 || r.Interfaces[1].Sandbox != testkit.Path(p.ns) || len(r.IPs) != 1 || r.IPs[0].Interface == nil || *r.IPs[0].Interface != 1 {
				t.Fatalf("ADD %s result %s", id, out)
			}
			if len(r.Routes) != 1 || r.Routes[0].Dst != "0.0.0.0/0" || r.Routes[0].GW != r.IPs[0].Gateway {
				t.Fatalf("ADD %s routes %s", id, out)
			}
		}
		p.ip, p.mac, p.out = strings.Split(r.IPs[0].Address, "/")[0], r.Interfaces[1].Mac, out
		return p
	}
	pa := add("ctr-a", "blue", "n1", "1.1.0")
	pb := add("ctr-b", "blue", "n2", "1.0.0")
	pc := add("ctr-c", "red", "n3", "0.4.0")
	pd := add("ctr-d", "red", "n1", "1.1.0")
	testkit.MustPing(t, pa.ns, pb.ip, 2, 2*time.Second)
	// Every pod reaches its gateway, answered by its own node.
	testkit.MustPing(t, pa.ns, "198.51.100.1", 1, 2*time.Second)
	testkit.MustPing(t, pb.ns, "198.51.100.1", 1, 2*time.Second)
	testkit.MustPing(t, pc.ns, "203.0.113.1", 1, 2*time.Second)
	// Networks are isolated, even on a node that forwards and hosts both.
	testkit.Run(t, c.nodes["n1"].ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, dst := range []string{pc.ip, pd.ip} {
		if err := testkit.Ping(pa.ns, dst, 1, time.Second); err == nil {
			t.Fatalf("blue pod reached red pod %s", dst)
		}
	}
	testkit.MustPing(t, pd.ns, pc.ip, 1, 2*time.Second)

	// CHECK with the previous result passes; after the address is removed
	// it fails.
	withPrev := func(p *pod) string {
		var conf map[string]any
		_ = json.Unmarshal([]byte(p.conf), &conf)
		var prev any
		_ = json.Unmarshal([]byte(p.out), &prev)
		conf["prevResult"] = prev
		b, _ := json.Marshal(conf)
		return string(b)
	}
	if _, err := cniRun("CHECK", pa.id, testkit.Path(pa.ns), "eth0", withPrev(pa)); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	testkit.Run(t, pb.ns, "ip", "addr", "flush", "dev", "eth0")
	if _, err := cniRun("CHECK", pb.id, testkit.Path(pb.ns), "eth0", withPrev(pb)); err == nil || !strings.Contains(err.Error(), "lacks address") {
		t.Fatalf("CHECK of a broken interface: %v", err)
	}
	testkit.Run(t, pb.ns, "ip", "addr", "add", pb.ip+"/24", "dev", "eth0")

	// DEL leaves no interface, no FDB entry elsewhere, no allocation; a
	// second DEL and a DEL after the namespace is gone succeed.
	before := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show"))
	if _, err := cniRun("DEL", pa.id, testkit.Path(pa.ns), "eth0", pa.conf); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, err := cniRun("DEL", pa.id, testkit.Path(pa.ns), "eth0", pa.conf); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if out, _ := testkit.Try(pa.ns, "ip", "link", "show", "eth0"); !strings.Contains(out, "does not exist") {
		t.Fatalf("eth0 still in the pod after DEL: %s", out)
	}
	if strings.Contains(c.mustCtl("get", "endpoints"), pa.ip+"/") {
		t.Fatal("pa's address is still allocated")
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if strings.Contains(c.fdb("n2", 100), pa.mac) {
			return fmt.Errorf("n2 still forwards to pa")
		}
		return nil
	}))
	// n1 had no other blue endpoint: its host veth goes, and so does the
	// network's bridge and VXLAN device, which its plan no longer holds.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		after := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show"))
		// Left: lo, eth0, and the red network with ctr-d's host veth.
		if strings.Contains(after, "skb100") || strings.Contains(after, "skv100") || strings.Count(after, "skp") != 1 {
			return fmt.Errorf("after DEL n1 has %s (before: %s)", after, before)
		}
		return nil
	}))
	testkit.Run(t, pc.ns, "true")
	if _, err := cniRun("DEL", pc.id, "/var/run/netns/gone-"+pc.id, "eth0", pc.conf); err != nil {
		t.Fatalf("DEL with the namespace gone: %v", err)
	}

	// ADD after DEL of the same container works.
	pa2 := add("ctr-a", "blue", "n1", "1.1.0")
	testkit.MustPing(t, pa2.ns, pb.ip, 1, 2*time.Second)

	// GC removes this network's endpoints of containers that are gone.
	add("ctr-gone", "blue", "n1", "1.1.0")
	gc := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"cni.dev/valid-attachments":[{"containerID":"ctr-a","ifname":"eth0"}]}`, sock("n1"))
	if _, err := cniRun("GC", "", "", "", gc); err != nil {
		t.Fatalf("GC: %v", err)
	}
	eps := c.mustCtl("get", "endpoints", "--node", "n1")
	if !strings.Contains(eps, pa2.ip+"/") || !strings.Contains(eps, pd.ip+"/") || strings.Count(eps, "\n") != 3 {
		t.Fatalf("after GC n1 has:\n%s\nwant ctr-a (blue) and ctr-d (red, another network)", eps)
	}
}

func TestCNIBadConfig(t *testing.T) {
	c := newCluster(t, "n1")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	ns := testkit.New(t)
	sock := c.nodes["n1"].socket
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", cniConf("blue", sock, "1.1.0")); return err }))
	before := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show"))
	for _, bad := range []struct {
		name, conf string
		code       int
		words      string
	}{
		{"missing network", `{"cniVersion":"1.1.0","name":"x","type":"skiff-cni","socket":"` + sock + `"}`, 7, `"network" is required`},
		{"unknown network", cniConf("nope", sock, "1.1.0"), 7, `network "nope" does not exist`},
		{"bad cniVersion", cniConf("blue", sock, "9.9.9"), 1, "9.9.9"},
		{"socket missing", cniConf("blue", "/nonexistent/agent.sock", "1.1.0"), 11, "skiff-agent is not reachable"},
		{"malformed JSON", `{"cniVersion":"1.1.0",`, 6, ""},
		{"bad mtu", `{"cniVersion":"1.1.0","name":"x","type":"skiff-cni","network":"blue","mtu":-5,"socket":"` + sock + `"}`, 7, `"mtu"`},
	} {
		out, err := cniRun("ADD", "ctr-bad", testkit.Path(ns), "eth0", bad.conf)
		if err == nil {
			t.Errorf("%s: ADD succeeded", bad.name)
			continue
		}
		var e struct {
			Code    int    `json:"code"`
			Msg     string `json:"msg"`
			Details string `json:"details"`
		}
		if jerr := json.Unmarshal([]byte(out), &e); jerr != nil || e.Code != bad.code || !strings.Contains(e.Msg+" "+e.Details, bad.words) {
			t.Errorf("%s: got %s (%v), want code %d saying %q", bad.name, out, err, bad.code, bad.words)
		}
	}
	if after := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show")); after != before {
		t.Fatalf("bad configs left links:\n%s\n%s", before, after)
	}
	if out := testkit.Run(t, ns, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
		t.Fatalf("bad configs left an interface in the pod: %s", out)
	}
	if out := c.mustCtl("get", "endpoints"); strings.Count(out, "\n") != 1 {
		t.Fatalf("bad configs left endpoints:\n%s", out)
	}
	// STATUS fails with "not available" when the agent is gone.
	stop(c.nodes["n1"].agent)
	out, err := cniRun("STATUS", "", "", "", cniConf("blue", sock, "1.1.0"))
	if err == nil || !strings.Contains(out, `"code": 50`) && !strings.Contains(out, `"code":50`) {
		t.Fatalf("STATUS with the agent stopped: %s %v", out, err)
	}
}

// TestCNICycles runs 100 ADD/DEL cycles and checks that nothing leaks:
// links on the node, endpoints and addresses in the controller.
func TestCNICycles(t *testing.T) {
	c := newCluster(t, "n1")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	conf := cniConf("blue", c.nodes["n1"].socket, "1.1.0")
	ns := testkit.New(t)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
	// One warm-up cycle creates the network's bridge and VXLAN device.
	if _, err := cniRun("ADD", "warm", testkit.Path(ns), "eth0", conf); err != nil {
		t.Fatal(err)
	}
	if _, err := cniRun("DEL", "warm", testkit.Path(ns), "eth0", conf); err != nil {
		t.Fatal(err)
	}
	// With no endpoint left, the node holds no Skiff device at all.
	const base = "lo: eth0"
	settled := func() error {
		if got := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show")); got != base {
			return fmt.Errorf("n1 has links %s, want %s", got, base)
		}
		return nil
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(settled))
	for i := range 100 {
		id := fmt.Sprintf("cycle-%d", i%7)
		if _, err := cniRun("ADD", id, testkit.Path(ns), "eth0", conf); err != nil {
			t.Fatalf("cycle %d ADD: %v", i, err)
		}
		if _, err := cniRun("DEL", id, testkit.Path(ns), "eth0", conf); err != nil {
			t.Fatalf("cycle %d DEL: %v", i, err)
		}
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(settled))
	if out := testkit.Run(t, ns, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
		t.Fatalf("interface leaked in the pod: %s", out)
	}
	if out := c.mustCtl("get", "endpoints"); strings.Count(out, "\n") != 1 {
		t.Fatalf("endpoints leaked:\n%s", out)
	}
	// Every address is free again: a full /24 minus gateway can still be
	// asked for the first address a fresh ADD would get.
	if out := c.mustCtl("endpoint", "create", "probe", "--network", "blue", "--node", "n1", "--ip", "198.51.100.2"); !strings.Contains(out, "created") {
		t.Fatalf("address not freed: %s", out)
	}
}
