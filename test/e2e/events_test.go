package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestAgentEventsAndMetrics checks that the agent reports new links and
// underlay address changes to the controller, and serves /metrics and
// /healthz.
func TestAgentEventsAndMetrics(t *testing.T) {
	c := newCluster(t, "n1")
	n1 := c.nodes["n1"]
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !strings.Contains(c.mustCtl("get", "nodes"), "true") {
			return fmt.Errorf("agent not connected")
		}
		return nil
	}))
	testkit.Run(t, n1.ns, "ip", "link", "add", "ext0", "type", "veth", "peer", "name", "ext1")
	testkit.Run(t, n1.ns, "ip", "addr", "del", n1.ip+"/24", "dev", "eth0")
	testkit.Run(t, n1.ns, "ip", "addr", "add", n1.ip+"/24", "dev", "eth0")
	for _, want := range []string{"kind=link-added subject=ext0", "kind=underlay-address subject=192.0.2.1 detail=removed", "kind=underlay-address subject=192.0.2.1 detail=added"} {
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			b, _ := os.ReadFile(c.ctrlLog)
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("controller has not logged %q", want)
			}
			return nil
		}))
	}
	metrics := testkit.Run(t, c.ul, "curl", "-sf", "http://"+n1.ip+":9100/metrics")
	for _, want := range []string{"skiff_agent_plan_revision", "skiff_agent_plan_applied_revision", "skiff_agent_controller_connected 1", `skiff_agent_datapath_applies_total{result="ok"}`, "skiff_agent_netlink_writes"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if out := testkit.Run(t, c.ul, "curl", "-sf", "http://"+n1.ip+":9100/healthz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/healthz: %q", out)
	}
}
