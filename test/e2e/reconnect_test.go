package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// connected reports whether a node's agent holds a plan stream (its local
// API's status).
func (c *cluster) connected(name string) bool {
	cl := localapi.NewClient(c.nodes[name].socket)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := cl.Status(ctx)
	return err == nil && s.Connected
}

// backAfter waits until the running controller serves every agent a plan
// stream and each agent says it is connected, and returns how long that
// took from start.
func (c *cluster) backAfter(t *testing.T, start time.Time) time.Duration {
	t.Helper()
	for name := range c.nodes {
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			b, _ := os.ReadFile(c.ctrlLog)
			if !strings.Contains(string(b), `msg="plan stream opened" node=`+name+" ") {
				return fmt.Errorf("agent %s has no stream from the new controller", name)
			}
			if !c.connected(name) {
				return fmt.Errorf("agent %s is not back", name)
			}
			return nil
		}))
	}
	return time.Since(start)
}

// TestAgentsBackAfterControllerRestart: agents reconnect soon after their
// controller returns, whether it died cleanly (its connections reset) or
// vanished without a word (its packets dropped, as a lost host or a pod
// whose network went first). The times are logged, not asserted (see
// docs/perf-log/kubernetes.md).
func TestAgentsBackAfterControllerRestart(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	for name := range c.nodes {
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			if !c.connected(name) {
				return fmt.Errorf("agent %s is not connected", name)
			}
			return nil
		}))
	}
	probe := func(name, path string) string {
		out, err := testkit.Try(c.ul, "curl", "-s", "-w", " %{http_code}", "http://"+c.nodes[name].ip+":9100"+path)
		if err != nil {
			return err.Error()
		}
		return strings.ReplaceAll(out, "\n", "")
	}
	for _, down := range []time.Duration{time.Second, 8 * time.Second} {
		stop(c.ctrl)
		if down > time.Second {
			// Headless: ready on the plan it holds, and live.
			testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
				if got := probe("n1", "/readyz"); !strings.HasPrefix(got, "ready, headless: the last plan") || !strings.HasSuffix(got, " 200") {
					return fmt.Errorf("/readyz with the controller down: %q", got)
				}
				return nil
			}))
			if got := probe("n1", "/livez"); got != "ok 200" {
				t.Errorf("/livez with the controller down: %q", got)
			}
		}
		time.Sleep(down)
		start := time.Now()
		c.startController()
		serving := time.Now()
		back := c.backAfter(t, serving)
		t.Logf("killed, down %v: controller serving %v after its start, every agent back %v after that", down, serving.Sub(start), back)
		if got := probe("n1", "/readyz"); !strings.HasPrefix(got, "ready: connected, plan revision") || !strings.HasSuffix(got, " 200") {
			t.Errorf("/readyz once back: %q", got)
		}
	}
	// Vanished: the controller's packets are dropped before it dies, so
	// no agent learns that its connection is gone; it returns 3 s later.
	testkit.Run(t, c.ul, "nft", "add table inet sktest { chain out { type filter hook output priority 0; tcp sport 7400 drop; }; }")
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "exec", c.ul, "nft", "delete", "table", "inet", "sktest").Run()
	})
	stop(c.ctrl)
	time.Sleep(3 * time.Second)
	testkit.Run(t, c.ul, "nft", "delete table inet sktest")
	start := time.Now()
	c.startController()
	serving := time.Now()
	back := c.backAfter(t, serving)
	t.Logf("vanished, down 3s: controller serving %v after its start, every agent back %v after that", serving.Sub(start), back)
	for name := range c.nodes {
		if e := c.agentErrors(name); strings.Contains(e, "datapath") {
			t.Errorf("agent %s: %s", name, e)
		}
	}
}
