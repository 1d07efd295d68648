package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestAgentEventsAndMetrics checks that the agent reports new links and
// underlay address changes to the controller, and serves /metrics and
// /healthz.
func TestAgentEventsAndMetrics(t *testing.T) {
	c := newCluster(t, "n1")
	n1 := c.nodes["n1"]
	eventually(t, func() error {
		if !strings.Contains(c.mustCtl("get", "nodes"), "true") {
			return fmt.Errorf("agent not connected")
		}
		return nil
	})
	testns.Run(t, n1.ns, "ip", "link", "add", "ext0", "type", "veth", "peer", "name", "ext1")
	testns.Run(t, n1.ns, "ip", "addr", "del", n1.ip+"/24", "dev", "eth0")
	testns.Run(t, n1.ns, "ip", "addr", "add", n1.ip+"/24", "dev", "eth0")
	for _, want := range []string{"kind=link-added subject=ext0", "kind=underlay-address subject=192.0.2.1 detail=removed", "kind=underlay-address subject=192.0.2.1 detail=added"} {
		eventually(t, func() error {
			b, _ := os.ReadFile(c.ctrlLog)
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("controller has not logged %q", want)
			}
			return nil
		})
	}
	metrics := testns.Run(t, c.ul, "curl", "-sf", "http://"+n1.ip+":9100/metrics")
	for _, want := range []string{"skiff_agent_plan_revision", "skiff_agent_controller_connected 1", `skiff_agent_datapath_applies_total{result="ok"}`, "skiff_agent_netlink_writes"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if out := testns.Run(t, c.ul, "curl", "-sf", "http://"+n1.ip+":9100/healthz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/healthz: %q", out)
	}
}
