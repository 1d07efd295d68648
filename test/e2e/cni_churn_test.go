package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// podNS makes a pod's namespace that the test may delete itself (as a
// runtime does when it tears a sandbox down); whatever is left goes at
// cleanup.
func podNS(t *testing.T, name string) string {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(testkit.Path(name)); err == nil {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	})
	return name
}

// agentErrors returns the ERROR lines of a node's agent log.
func (c *cluster) agentErrors(name string) string {
	b, _ := os.ReadFile(c.nodes[name].log)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConcurrentDeletesLogNoError scales 30 pods to 0 at once, as a
// Deployment's scale-down does: each pod's CNI DEL runs concurrently with
// the others and with the reconciles they cause, and for half of them the
// runtime removes the pod's namespace first (its veth vanishes under a
// reconcile that listed it). The agent logs no error, and nothing is left.
func TestConcurrentDeletesLogNoError(t *testing.T) {
	c := newCluster(t, "n1")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	conf := cniConf("blue", c.nodes["n1"].socket, "1.1.0")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
	const pods = 30
	names := make([]string, pods)
	for i := range names {
		names[i] = podNS(t, fmt.Sprintf("skt-churn-%d-%d", os.Getpid(), i))
	}
	run := func(f func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, pods)
		sem := make(chan struct{}, 10)
		for i := range pods {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := f(i); err != nil {
					errs <- fmt.Errorf("pod %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	run(func(i int) error {
		_, err := cniRun("ADD", names[i], testkit.Path(names[i]), "eth0", conf)
		return err
	})
	if got := strings.Count(c.mustCtl("get", "endpoints"), "\n") - 1; got != pods {
		t.Fatalf("%d endpoints after the ADDs, want %d", got, pods)
	}
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	for i := range pods {
		wg.Go(func() {
			netns := testkit.Path(names[i])
			if i%2 == 0 {
				// The sandbox is gone before the DEL: the runtime passes
				// no namespace.
				if out, err := exec.Command("ip", "netns", "del", names[i]).CombinedOutput(); err != nil {
					errs <- fmt.Errorf("ip netns del: %v: %s", err, out)
					return
				}
				netns = ""
			}
			if _, err := cniRun("DEL", names[i], netns, "eth0", conf); err != nil {
				errs <- fmt.Errorf("pod %d DEL: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if got := linkNames(testkit.Run(t, c.nodes["n1"].ns, "ip", "-o", "link", "show")); got != "lo: eth0" {
			return fmt.Errorf("n1 has links %s", got)
		}
		return nil
	}))
	if out := c.mustCtl("get", "endpoints"); strings.Count(out, "\n") != 1 {
		t.Errorf("endpoints left:\n%s", out)
	}
	if e := c.agentErrors("n1"); e != "" {
		t.Errorf("the agent logged errors while pods were deleted:\n%s", e)
	}
}
