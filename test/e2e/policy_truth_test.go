package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/skiff-sdn/skiff/internal/testns"
	"github.com/skiff-sdn/skiff/test/policytruth"
)

// The truth-table test (package policytruth): its NetworkPolicies, each
// case applied with skiffctl to a 3-node cluster of pods made by the CNI
// plugin, and the reachability matrix measured with real TCP, UDP and ICMP
// must equal the one a plain reading of the Kubernetes rules gives.
func TestPolicyTruthTable(t *testing.T) {
	c := newCluster(t, policytruth.Nodes...)
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", policytruth.Subnet)
	policytruth.Run(t, policytruth.Env{
		LabelNamespace: func(t *testing.T, ns, k, v string) { c.mustCtl("namespace", "label", ns, k+"="+v) },
		CreatePod: func(t *testing.T, p *policytruth.Pod) {
			netns := testns.New(t)
			lb, _ := yaml.Marshal(p.Labels)
			lj, _ := yaml.YAMLToJSON(lb)
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"labels":%s}`, c.nodes[p.Node].socket, lj)
			eventually(t, func() error { _, err := cniRun("STATUS", "", "", "", conf); return err })
			if _, err := cniRunIn(p.Namespace, "ADD", p.Name, testns.Path(netns), "eth0", conf); err != nil {
				t.Fatal(err)
			}
			p.NetNS, p.IP = testns.Path(netns), firstIPv4(t, netns)
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
