package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestCNIDelWhileControllerDown: with the controller killed, a pod's CNI
// DEL succeeds at once and its interface is gone; when the controller is
// back, the endpoint and its address are gone from the store too.
func TestCNIDelWhileControllerDown(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	conf := cniConf("blue", c.nodes["n1"].socket, "1.1.0")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
	pod := testkit.New(t)
	out, err := cniRun("ADD", "gone-pod", testkit.Path(pod), "eth0", conf)
	if err != nil {
		t.Fatal(err)
	}
	var res cniResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) != 1 {
		t.Fatalf("ADD result %s: %v", out, err)
	}
	addr := strings.Split(res.IPs[0].Address, "/")[0]

	stop(c.ctrl)
	start := time.Now()
	if _, err := cniRun("DEL", "gone-pod", testkit.Path(pod), "eth0", conf); err != nil {
		t.Fatalf("DEL with the controller down: %v", err)
	}
	t.Logf("DEL with the controller down took %v", time.Since(start))
	if links := testkit.Run(t, pod, "ip", "-o", "link", "show"); strings.Contains(links, "eth0") {
		t.Errorf("the pod's interface is still there: %s", links)
	}
	if links := testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show"); strings.Contains(links, "skp") {
		t.Errorf("the host side is still there: %s", links)
	}
	// DEL again (runtimes retry) is still fine.
	if _, err := cniRun("DEL", "gone-pod", testkit.Path(pod), "eth0", conf); err != nil {
		t.Fatalf("second DEL with the controller down: %v", err)
	}

	c.startController()
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if out := c.mustCtl("get", "endpoints"); strings.Count(out, "\n") != 1 {
			return fmt.Errorf("endpoints left:\n%s", out)
		}
		return nil
	}))
	// The address is free: it can be asked for by name.
	if out := c.mustCtl("endpoint", "create", "probe", "--network", "blue", "--node", "n2", "--ip", addr); !strings.Contains(out, "created") {
		t.Fatalf("address %s not freed: %s", addr, out)
	}
	if e := c.agentErrors("n1"); e != "" {
		t.Errorf("agent errors:\n%s", e)
	}
}
