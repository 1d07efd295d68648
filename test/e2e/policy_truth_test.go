package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/skiff-sdn/skiff/test/policytruth"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// The truth-table test (package policytruth): its NetworkPolicies, each
// case applied with skiffctl to a 3-node cluster of pods made by the CNI
// plugin, and the reachability matrix measured with real TCP, UDP and ICMP
// must equal the one a plain reading of the Kubernetes rules gives.
func TestPolicyTruthTable(t *testing.T) {
	policyTruth(t, false)
}

// TestPolicyTruthTableIPv6 is the truth table's IPv6 pass: the pods are
// dual-stack, probed on their IPv6 addresses (TCP, UDP, ICMPv6), and the
// cases' ipBlocks are IPv6 CIDRs (policytruth.Subnet6, ::/0, /128).
func TestPolicyTruthTableIPv6(t *testing.T) {
	policyTruth(t, true)
}

func policyTruth(t *testing.T, v6 bool) {
	c := newCluster(t, policytruth.Nodes...)
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", policytruth.Subnet)
	if v6 {
		c.mustCtl("subnet", "create", "blue-v6", "--network", "blue", "--cidr", policytruth.Subnet6)
	}
	policytruth.Run(t, policytruth.Env{
		LabelNamespace: func(t *testing.T, ns, k, v string) { c.mustCtl("namespace", "label", ns, k+"="+v) },
		CreatePod: func(t *testing.T, p *policytruth.Pod) {
			netns := testkit.New(t)
			lb, _ := yaml.Marshal(p.Labels)
			lj, _ := yaml.YAMLToJSON(lb)
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"labels":%s}`, c.nodes[p.Node].socket, lj)
			testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", conf); return err }))
			if _, err := cniRunIn(p.Namespace, "ADD", p.Name, testkit.Path(netns), "eth0", conf); err != nil {
				t.Fatal(err)
			}
			p.NetNS, p.IP = testkit.Path(netns), firstIPv4(t, netns)
			if v6 {
				p.IP = firstIPv6(t, netns)
			}
		},
		Apply: func(t *testing.T, doc string) {
			file := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			c.mustCtl("policy", "apply", "-f", file)
		},
		Delete: func(t *testing.T, name string) { c.mustCtl("delete", "policy", name) },
	}, policytruth.Options{})
}

// firstIPv6 returns the global IPv6 address of a pod's eth0.
func firstIPv6(t testing.TB, ns string) string {
	t.Helper()
	f := strings.Fields(testkit.Run(t, ns, "ip", "-o", "-6", "addr", "show", "dev", "eth0", "scope", "global"))
	for i, w := range f {
		if w == "inet6" {
			return strings.Split(f[i+1], "/")[0]
		}
	}
	t.Fatalf("no global IPv6 address in %s", ns)
	return ""
}

// cniRunIn is cniRun for a pod in a Kubernetes namespace.
func cniRunIn(podNS, command, containerID, netns, ifName, conf string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "skiff-cni"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+ifName, "CNI_PATH="+binDir, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+podNS+";K8S_POD_NAME="+containerID)
	cmd.Stdin = strings.NewReader(conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, out)
	}
	return string(out), nil
}
