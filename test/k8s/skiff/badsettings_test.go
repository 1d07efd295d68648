package skiff

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// start brings up a cluster and applies Skiff with settings, without
// waiting for it to work.
func start(t *testing.T, settings string) *cluster.Cluster {
	t.Helper()
	root := Root(t)
	c := cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: Images(t, root, t.TempDir())})
	t.Cleanup(func() {
		if t.Failed() {
			Diagnose(t, c)
		}
	})
	c.MustKubectl(t, "apply", "-k", WriteOverlay(t, root, c, Overlay{Settings: settings}))
	return c
}

// noConfList checks that no node got Skiff's CNI configuration.
func noConfList(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		if _, err := os.Stat(filepath.Join(n.CNIConfDir(), "10-skiff.conflist")); !os.IsNotExist(err) {
			t.Errorf("%s has Skiff's conflist (%v) from settings that were refused", n.Name, err)
		}
		if ents, _ := os.ReadDir(n.CNIConfDir()); len(ents) > 0 {
			t.Errorf("%s's CNI configuration directory is not empty: %v", n.Name, ents)
		}
	}
}

// daemonSetReady is the agent DaemonSet's ready and desired counts.
func daemonSetReady(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	out, _ := c.Kubectl("-n", "skiff-system", "get", "daemonset", "skiff-agent", "-o", "jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}")
	return strings.TrimSpace(out)
}

// TestBadSettingsVNI: a ConfigMap with a VNI out of range stops the
// controller and every agent at start, each log naming the field and the
// reason, the DaemonSet shows no agent ready, and nothing is installed on
// the nodes.
func TestBadSettingsVNI(t *testing.T) {
	c := start(t, strings.Replace(DefaultSettings, "vni: 4096", "vni: 0", 1))
	const want = "settings: podNetwork.vni: must be 1..16777215, got 0"
	testkit.Eventually(t, "", 2*time.Minute, func() (bool, string) {
		for _, sel := range []string{"app.kubernetes.io/name=skiff-agent", "app.kubernetes.io/name=skiff-controller"} {
			out, _ := c.Kubectl("-n", "skiff-system", "logs", "-l", sel, "--all-containers", "--prefix", "--tail=20")
			if strings.Count(out, want) < map[bool]int{true: 2, false: 1}[strings.Contains(sel, "agent")] {
				return false, sel + " pods do not say " + want + " yet:\n" + out
			}
		}
		return true, ""
	})
	if got := daemonSetReady(t, c); !strings.HasPrefix(got, "0/") {
		t.Errorf("DaemonSet ready %s with refused settings", got)
	}
	noConfList(t, c)
	out, _ := c.Kubectl("-n", "skiff-system", "logs", "-l", "app.kubernetes.io/name=skiff-agent", "--all-containers", "--prefix", "--tail=3")
	t.Logf("agents say:\n%s", out)
}

// TestSettingsUnknownNetwork: settings naming a pod network that does not
// exist (and must not be created) leave the agents running but not ready,
// saying why in their logs; nothing is installed on the nodes. Once an
// operator creates the network, the agents install the CNI by themselves
// and the nodes turn Ready.
func TestSettingsUnknownNetwork(t *testing.T) {
	settings := strings.Replace(strings.Replace(DefaultSettings, "name: pods", "name: nosuch", 1), "create: true", "create: false", 1)
	c := start(t, settings)
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "statefulset/skiff-controller", "--timeout=2m")
	const want = `CNI network \"nosuch\" does not exist at the controller: nothing is installed`
	testkit.Eventually(t, "", 2*time.Minute, func() (bool, string) {
		out, _ := c.Kubectl("-n", "skiff-system", "logs", "-l", "app.kubernetes.io/name=skiff-agent", "-c", "agent", "--prefix", "--tail=20")
		if strings.Count(out, want) < 2 {
			return false, "the agents do not say why they install nothing:\n" + out
		}
		return true, ""
	})
	if got := daemonSetReady(t, c); !strings.HasPrefix(got, "0/") {
		t.Errorf("DaemonSet ready %s without its pod network", got)
	}
	noConfList(t, c)

	start := time.Now()
	skiffctl(t, c, "network", "create", "nosuch", "--vni", "4096")
	skiffctl(t, c, "subnet", "create", "nosuch-v4", "--network", "nosuch", "--cidr", "198.51.100.0/24")
	c.MustKubectl(t, "-n", "skiff-system", "rollout", "status", "daemonset/skiff-agent", "--timeout=2m")
	c.WaitNodes(t, time.Minute, true)
	t.Logf("network created -> agents ready and nodes Ready in %v", time.Since(start))
}
