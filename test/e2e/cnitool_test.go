package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// cnitool runs the CNI project's cnitool with a network configuration
// directory that holds one network, for one node's agent.
func cnitool(t *testing.T, confDir string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "cnitool"), args...)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+confDir, "CNI_PATH="+binDir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCNIThroughCnitool drives skiff-cni through cnitool: ADD on two nodes,
// ping and an iperf3 TCP transfer across them, CHECK, DEL leaving nothing.
func TestCNIThroughCnitool(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatal("iperf3 is not installed: run `make deps`")
	}
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	pa, pb := testkit.New(t), testkit.New(t)
	confs := map[string]string{}
	for name, n := range c.nodes {
		dir := t.TempDir()
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","plugins":[{"type":"skiff-cni","network":"blue","socket":%q}]}`, n.socket)
		if err := os.WriteFile(filepath.Join(dir, "10-blue.conflist"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		confs[name] = dir
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			out, err := cnitool(t, dir, "status", "blue", testkit.Path(pa))
			if err != nil {
				return fmt.Errorf("status on %s: %v %s", name, err, out)
			}
			return nil
		}))
	}
	for _, x := range []struct{ node, ns string }{{"n1", pa}, {"n2", pb}} {
		if out, err := cnitool(t, confs[x.node], "add", "blue", testkit.Path(x.ns)); err != nil {
			t.Fatalf("cnitool add on %s: %v\n%s", x.node, err, out)
		}
		if out, err := cnitool(t, confs[x.node], "check", "blue", testkit.Path(x.ns)); err != nil {
			t.Fatalf("cnitool check on %s: %v\n%s", x.node, err, out)
		}
	}
	ipOf := func(ns string) string {
		out := testkit.Run(t, ns, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
		f := strings.Fields(out)
		for i, w := range f {
			if w == "inet" {
				return strings.Split(f[i+1], "/")[0]
			}
		}
		t.Fatalf("no address in %s: %s", ns, out)
		return ""
	}
	testkit.MustPing(t, pa, ipOf(pb), 2, 2*time.Second)
	testkit.Run(t, pb, "iperf3", "-s", "-1", "-D", "-B", ipOf(pb))
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		out, err := testkit.Try(pa, "iperf3", "-c", ipOf(pb), "-t", "2", "-J")
		if err != nil {
			return fmt.Errorf("iperf3: %v %s", err, out)
		}
		if !strings.Contains(out, `"bits_per_second"`) {
			return fmt.Errorf("iperf3 printed no throughput: %s", out)
		}
		return nil
	}))
	for _, x := range []struct{ node, ns string }{{"n1", pa}, {"n2", pb}} {
		if out, err := cnitool(t, confs[x.node], "del", "blue", testkit.Path(x.ns)); err != nil {
			t.Fatalf("cnitool del on %s: %v\n%s", x.node, err, out)
		}
		if out, _ := testkit.Try(x.ns, "ip", "link", "show", "eth0"); !strings.Contains(out, "does not exist") {
			t.Fatalf("eth0 left in the pod on %s", x.node)
		}
	}
	if out := c.mustCtl("get", "endpoints"); strings.Count(out, "\n") != 1 {
		t.Fatalf("endpoints left after cnitool del:\n%s", out)
	}
}
