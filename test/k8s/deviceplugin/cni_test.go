package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skiff-sdn/skiff/cni"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestCNIGetsTheKubeletsVF: skiff-cni is the node's network, run by
// containerd for the real kubelet's pods, with skiff-deviceplugin
// advertising the stood-in VFs. A pod asking for skiff.io/vf is admitted,
// and its CNI ADD learns the VF from the kubelet's pod resources API: the
// VF the API names for the pod is the one the ADD asked the agent for.
// The node's agent runs the software datapath (no switchdev eswitch
// here), so the ADD is refused, naming that VF and the reason, rather
// than giving the pod a veth; nothing is left behind. A pod that asks for
// no VF gets its veth from the same agent. (The VF moved into a pod, and
// its traffic through the representor's rules, are shown in the kernel
// VM: test/kernelvm/vfpodvm.)
func TestCNIGetsTheKubeletsVF(t *testing.T) {
	work := t.TempDir()
	pause, testpod := cluster.TestImages(t, work)
	bins := filepath.Join(work, "bin")
	Build(t, bins, "skiff-deviceplugin", "skiff-cni", "skiff-controller", "skiff-agent", "skiffctl")
	c := cluster.Start(t, cluster.Options{Nodes: 1, Images: []string{pause, testpod}, BeforeKubelet: skiffCNI(bins),
		KubeletConfig: "nodeStatusUpdateFrequency: 1s\n"})
	n := c.Nodes[0]
	cs := c.Client(t)
	ctx := context.Background()
	v := NewVFs(t, n, "5e", 2)
	ctl := startSkiff(t, n, v, bins)
	StartPlugin(t, v, filepath.Join(bins, "skiff-deviceplugin"), "skiff-deviceplugin", goodConfig)
	waitAdvertised(t, cs, n.Name, resource, 2, 2, time.Minute)
	c.WaitNodesReady(t, time.Minute)
	c.WaitDefaultServiceAccount(t, "default")

	// No VF asked: a veth from skiff-cni and the agent.
	c.Apply(t, plainPod("plain"))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/plain", "--timeout=120s")
	if ip := podIP(t, cs, "plain"); !strings.HasPrefix(ip, "203.0.113.") {
		t.Fatalf("pod plain has IP %q, want one of skiff's subnet 203.0.113.0/25", ip)
	}

	// One VF asked: the kubelet allocates it, the CNI ADD asks for it.
	c.Apply(t, vfPod("vf1", 1, DevInfoDir(n)))
	var held string
	testkit.Eventually(t, "the kubelet to allocate vf1 a VF", time.Minute, func() (bool, string) {
		ids, err := PodVFs(ctx, n, "default", "vf1", resource)
		if err == nil && len(ids) == 1 {
			held = ids[0]
		}
		return held != "", ""
	})
	t.Logf("the pod resources API says the kubelet allocated %s to vf1", held)
	want := []string{"deviceID " + held + ": this node's datapath (mode software) has no VF endpoints"}
	var got string
	testkit.Eventually(t, "vf1's sandbox to be refused by skiff-cni, naming its VF", 2*time.Minute, func() (bool, string) {
		got = sandboxFailure(t, cs, "vf1")
		return strings.Contains(got, want[0]), ""
	})
	t.Logf("vf1's sandbox: %s", got)
	for _, other := range v.IDs {
		if other != held && strings.Contains(got, "deviceID "+other) {
			t.Errorf("the refusal names %s too, not only the kubelet's %s", other, held)
		}
	}

	// Nothing left behind: no endpoint of vf1's, the VF netdevs at home.
	if out := ctl("get", "endpoints"); strings.Count(out, "pod:default/") != 1 || strings.Contains(out, "pod:default/vf1") {
		t.Errorf("endpoints at the controller, want only plain's:\n%s", out)
	}
	for _, l := range append([]string{v.PF}, v.Netdevs...) {
		if _, err := n.Run("ip", "link", "show", l); err != nil {
			t.Errorf("%s is no longer in the node's namespace: %v", l, err)
		}
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "vf1", metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("vf1: %v, phase %v: want it not running", err, p.Status.Phase)
	}
	c.MustKubectl(t, "delete", "pod", "vf1", "plain", "--wait")
	testkit.Eventually(t, "plain's endpoint to go", time.Minute, func() (bool, string) {
		return !strings.Contains(ctl("get", "endpoints"), "pod:default/"), ""
	})
}

// skiffCNI installs skiff-cni as the node's network "pods": the agent's
// socket under the node's directory, VFs from the kubelet's pod
// resources socket.
func skiffCNI(bins string) func(n *cluster.Node) error {
	src := filepath.Join(bins, "skiff-cni")
	return func(n *cluster.Node) error {
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(n.CNIBinDir(), "skiff-cni"), b, 0o755)
		}
		if err != nil {
			return err
		}
		conf := fmt.Sprintf(`{"cniVersion":%q,"name":"pods","plugins":[{"type":"skiff-cni","network":"pods","socket":%q,"podResourcesSocket":%q}]}`,
			cni.ConfListVersion, agentSocket(n), PodResourcesSocket(n))
		return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-skiff.conflist"), []byte(conf), 0o644)
	}
}

func agentSocket(n *cluster.Node) string { return filepath.Join(n.Dir, "skiff-agent.sock") }

// startSkiff starts skiff-controller (embedded etcd) and skiff-agent
// (software mode, discovering v's tree) on node n, creates the network
// "pods", and returns a skiffctl runner. bins holds the binaries.
func startSkiff(t *testing.T, n *cluster.Node, v *VFs, bins string) func(args ...string) string {
	t.Helper()
	const addr = "127.0.0.1:7400"
	start := func(name string, args ...string) { StartOn(t, n, name, args...) }
	start("skiff-controller", filepath.Join(bins, "skiff-controller"), "--listen", addr, "--data-dir", filepath.Join(n.Dir, "skiff-data"))
	ctl := func(args ...string) string {
		t.Helper()
		out, err := n.Run(append([]string{filepath.Join(bins, "skiffctl"), "--controller", addr}, args...)...)
		if err != nil {
			t.Fatalf("skiffctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	testkit.Eventually(t, "the controller to serve", 30*time.Second, func() (bool, string) {
		_, err := n.Run(filepath.Join(bins, "skiffctl"), "--controller", addr, "get", "nodes")
		return err == nil, ""
	})
	ctl("network", "create", "pods", "--vni", "4096")
	ctl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "203.0.113.0/25")
	start("skiff-agent", filepath.Join(bins, "skiff-agent"), "--controller", addr, "--node", n.Name, "--underlay-ip", n.IP,
		"--mode", "software", "--sys-root", v.Tree.Root, "--socket", agentSocket(n), "--state-dir", filepath.Join(n.Dir, "skiff-agent"))
	testkit.Eventually(t, "the agent to register", 30*time.Second, func() (bool, string) { return strings.Contains(ctl("get", "nodes"), n.Name), "" })
	return ctl
}

// plainPod is a pod asking for no device.
func plainPod(name string) string { return testPod(name, "") }

func podIP(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// sandboxFailure is the latest FailedCreatePodSandBox event's message of
// pod name ("" when none).
func sandboxFailure(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	evs, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	var last time.Time
	for _, e := range evs.Items {
		if e.Reason == "FailedCreatePodSandBox" && !e.LastTimestamp.Time.Before(last) {
			msg, last = e.Message, e.LastTimestamp.Time
		}
	}
	return msg
}
