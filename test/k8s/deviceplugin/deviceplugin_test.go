package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	dp "github.com/skiff-sdn/skiff/deviceplugin"
	"github.com/skiff-sdn/skiff/deviceplugin/podresources"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const resource = "skiff.io/vf"

// goodConfig selects the stood-in ConnectX-6's VFs by PF, IDs and driver.
const goodConfig = `pools:
  - resourceName: skiff.io/vf
    use: netdev
    selectors:
      pfNames: [ens1f0np0]
      vendors: ["15b3"]
      devices: ["101e"]
      drivers: [mlx5_core]
`

// badConfig has a good pool and one whose vendor is not four hex
// digits: refused whole, so neither is advertised.
const badConfig = `pools:
  - resourceName: skiff.io/vf-b
    selectors: {pfNames: [ens1f0np0]}
  - resourceName: skiff.io/vf-c
    selectors: {vendors: ["0x15b3"]}
`

// TestWithRealKubelet runs skiff-deviceplugin on a node of a real
// cluster over a stood-in ConnectX-6 with 4 VFs (see the package
// documentation for what is stood in) and checks, against the kubelet
// and the API server: the Node advertises the pool; a pod asking for
// one VF is scheduled, admitted and runs, the kubelet's pod resources
// API names the VF it allocated, and the container has PCIDEVICE_ and
// the device-info file; a pod asking for more than is free is not
// scheduled; a kubelet restart keeps the pod, its allocation and the
// advertisement (the plugin registers again, and the new kubelet hears
// the next change); a VF removed turns unhealthy (allocatable drops)
// and is dropped after --gone-hold (capacity drops); the PF's link down
// makes every VF unhealthy and up healthy again; a malformed
// configuration advertises nothing and its log names the field; the
// plugin stopped removes its device-info files and the kubelet stops
// counting its devices as allocatable.
func TestWithRealKubelet(t *testing.T) {
	work := t.TempDir()
	pause, testpod := cluster.TestImages(t, work)
	bin := BuildPlugin(t, work)
	cni := bridgeCNI(t, filepath.Join(work, "cni"))
	c := cluster.Start(t, cluster.Options{Nodes: 1, Images: []string{pause, testpod}, BeforeKubelet: cni,
		// The kubelet computes the Node's status every second (10 s by
		// default), so what is measured is mostly the plugin and the
		// kubelet, not the status period.
		KubeletConfig: "nodeStatusUpdateFrequency: 1s\n"})
	n := c.Nodes[0]
	cs := c.Client(t)
	ctx := context.Background()
	v := NewVFs(t, n, "3b", 4)

	start := time.Now()
	plugin := StartPlugin(t, v, bin, "skiff-deviceplugin", goodConfig, "--gone-hold", "8s")
	waitAdvertised(t, cs, n.Name, resource, 4, 4, time.Minute)
	t.Logf("plugin started to the Node advertising 4/4 %s: %v", resource, time.Since(start))
	c.WaitNodesReady(t, time.Minute)
	c.WaitDefaultServiceAccount(t, "default")

	// A pod with one VF: scheduled on the node's allocatable, admitted
	// by the kubelet's device manager (Allocate), running.
	start = time.Now()
	c.Apply(t, vfPod("vf1", 1, DevInfoDir(n)))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/vf1", "--timeout=120s")
	t.Logf("pod with one VF created to Ready: %v", time.Since(start))
	ids, err := PodVFs(ctx, n, "default", "vf1", resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || v.Index(ids[0]) < 0 {
		t.Fatalf("pod resources API: vf1 holds %v, want one of %v", ids, v.IDs)
	}
	held := ids[0]
	t.Logf("the kubelet allocated %s (VF %d) to vf1", held, v.Index(held))
	if env := strings.TrimSpace(c.MustKubectl(t, "exec", "vf1", "--", "/bin/sh", "-c", "echo \"$"+dp.EnvName(resource)+"\"")); env != held {
		t.Errorf("%s in vf1 = %q, want %s", dp.EnvName(resource), env, held)
	}
	checkDevInfo(t, c, v, held)

	// The scheduler counts what the kubelet reports: 3 are free.
	c.Apply(t, vfPod("vf4", 4, DevInfoDir(n)))
	waitUnschedulable(t, cs, "vf4", "Insufficient "+resource)
	c.MustKubectl(t, "delete", "pod", "vf4", "--wait")

	// The kubelet restarts: it wipes the plugin's socket; the plugin
	// serves again and registers with the new kubelet.
	ctr := containerID(t, cs, "vf1")
	regs := plugin.Registrations()
	start = time.Now()
	n.RestartKubelet(t)
	t.Logf("kubelet restarted and synced: %v", time.Since(start))
	testkit.Eventually(t, "the plugin to register with the restarted kubelet", 30*time.Second, func() (bool, string) { return plugin.Registrations() > regs, "" })
	t.Logf("kubelet restart to the plugin registered again: %v", time.Since(start))
	waitAdvertised(t, cs, n.Name, resource, 4, 4, 30*time.Second)
	if now := containerID(t, cs, "vf1"); now != ctr {
		t.Errorf("vf1's container changed across the kubelet restart: %s, then %s", ctr, now)
	}
	if ids, err := PodVFs(ctx, n, "default", "vf1", resource); err != nil || !slices.Equal(ids, []string{held}) {
		t.Errorf("after the kubelet restart the pod resources API says vf1 holds %v (%v), want [%s]", ids, err, held)
	}

	// A free VF disappears: unhealthy at once (link event), dropped
	// after --gone-hold. The new kubelet hears it: the plugin's stream
	// to it is live.
	gone := len(v.IDs) - 1
	if v.IDs[gone] == held {
		gone--
	}
	start = time.Now()
	v.Remove(t, gone)
	waitAdvertised(t, cs, n.Name, resource, 4, 3, 30*time.Second)
	t.Logf("VF %d removed to the Node's allocatable 3 (capacity 4): %v", gone, time.Since(start))
	waitAdvertised(t, cs, n.Name, resource, 3, 3, 30*time.Second)
	t.Logf("VF %d removed to the Node's capacity 3 (--gone-hold 8s): %v", gone, time.Since(start))
	if log := plugin.Log(); !strings.Contains(log, `msg="VF gone" resource=skiff.io/vf vf=`+v.IDs[gone]) || !strings.Contains(log, "devices=4 healthy=3") {
		t.Errorf("the plugin's log does not show the VF unhealthy before it was dropped:\n%s", log)
	}
	if ids, err := PodVFs(ctx, n, "default", "vf1", resource); err != nil || !slices.Equal(ids, []string{held}) {
		t.Errorf("after VF %d went the pod resources API says vf1 holds %v (%v), want [%s]", gone, ids, err, held)
	}

	// The PF's link goes down: every VF unhealthy, then healthy again
	// when it comes back (the kernel's operstate, heard by the link
	// watch).
	start = time.Now()
	v.SetPFLink(t, false)
	waitAdvertised(t, cs, n.Name, resource, 3, 0, 30*time.Second)
	t.Logf("PF link down to the Node's allocatable 0: %v", time.Since(start))
	start = time.Now()
	v.SetPFLink(t, true)
	waitAdvertised(t, cs, n.Name, resource, 3, 3, 30*time.Second)
	t.Logf("PF link up to the Node's allocatable 3: %v", time.Since(start))
	if log := plugin.Log(); !strings.Contains(log, `reason="PF ens1f0np0 link is down"`) || !strings.Contains(log, "devices=3 healthy=0") {
		t.Errorf("the plugin's log does not show the PF's VFs unhealthy:\n%s", log)
	}

	// A malformed configuration: the plugin exits naming the field, and
	// nothing of it reaches the kubelet.
	bad := StartPlugin(t, v, bin, "skiff-deviceplugin-bad", badConfig)
	done, err := bad.Wait(30 * time.Second)
	if !done || err == nil {
		t.Fatalf("the plugin with a malformed configuration: exited %v, err %v\n%s", done, err, bad.Log())
	}
	if log := bad.Log(); !strings.Contains(log, `pools[1].selectors.vendors[0]: "0x15b3": want four lower-case hex digits`) {
		t.Errorf("the plugin's log does not name the field and the reason:\n%s", log)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"skiff.io/vf-b", "skiff.io/vf-c"} {
		if q, ok := node.Status.Capacity[corev1.ResourceName(r)]; ok {
			t.Errorf("the Node advertises %s = %s from a refused configuration", r, q.String())
		}
		if _, err := os.Stat(filepath.Join(n.KubeletDir(), "device-plugins", dp.SocketName(r))); err == nil {
			t.Errorf("a socket for %s from a refused configuration", r)
		}
	}

	// The pod goes: the kubelet's pod resources API forgets it.
	c.MustKubectl(t, "delete", "pod", "vf1", "--wait")
	testkit.Eventually(t, "the pod resources API to forget vf1", 30*time.Second, func() (bool, string) {
		_, err := PodVFs(ctx, n, "default", "vf1", resource)
		return errors.Is(err, podresources.ErrPodNotFound), ""
	})

	// The plugin stops: its device-info files go (as the specification
	// asks) and the kubelet no longer counts its devices as allocatable.
	start = time.Now()
	plugin.Stop(10 * time.Second)
	if _, err := DevInfo(n, resource, held); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device-info file of %s after the plugin stopped: %v, want none", held, err)
	}
	waitAdvertised(t, cs, n.Name, resource, 3, 0, 30*time.Second)
	t.Logf("plugin stopped to the Node's allocatable 0: %v", time.Since(start))
	// A registration the kubelet refused as a duplicate would have made
	// it forget the plugin's connection (the drop above would not come).
	if log := plugin.Log(); strings.Contains(log, "already connected") || plugin.Registrations() != 2 {
		t.Errorf("the plugin registered %d times (want 2: at start, after the kubelet restart), or was refused:\n%s", plugin.Registrations(), log)
	}
}

// checkDevInfo checks the device-info file of VF id, on the node (where
// the plugin wrote it) and inside vf1 (mounted at the standard path).
func checkDevInfo(t *testing.T, c *cluster.Cluster, v *VFs, id string) {
	t.Helper()
	i := v.Index(id)
	want := dp.DevInfo{Type: "pci", Version: dp.DevInfoVersion,
		PCI: &dp.PCIDevInfo{PCIAddress: id, PFPCIAddress: v.PFPCI, RepresentorDevice: fmt.Sprintf("3b_rep%d", i)}}
	onNode, err := DevInfo(v.Node, resource, id)
	if err != nil {
		t.Fatal(err)
	}
	inPod := c.MustKubectl(t, "exec", "vf1", "--", "cat", dp.DevInfoPath(dp.DefaultDevInfoDir, resource, id))
	var got dp.DevInfo
	if err := json.Unmarshal([]byte(inPod), &got); err != nil {
		t.Fatalf("device-info file in vf1: %v\n%s", err, inPod)
	}
	for where, di := range map[string]dp.DevInfo{"on the node": onNode, "in vf1": got} {
		if di.Type != want.Type || di.Version != want.Version || di.PCI == nil || *di.PCI != *want.PCI {
			t.Errorf("device-info of %s %s = %+v %+v, want %+v %+v", id, where, di, di.PCI, want, want.PCI)
		}
	}
}

// vfPod is a pod asking for count VFs, with the node's device-info
// directory mounted at the standard path.
func vfPod(name string, count int, devinfo string) string {
	return testPod(name, fmt.Sprintf(`    resources: {limits: {%s: "%d"}}
    volumeMounts: [{name: devinfo, mountPath: %s, readOnly: true}]
  volumes:
  - {name: devinfo, hostPath: {path: %q, type: Directory}}
`, resource, count, dp.DefaultDevInfoDir, devinfo))
}

// testPod is a pod of the test image sleeping, its container's spec
// followed by more (indented for the container, then the pod's spec).
func testPod(name, more string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: skiff.local/testpod:dev
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "exec sleep 3600"]
`, name) + more
}

// advertised is the Node's capacity and allocatable of resource.
func advertised(cs kubernetes.Interface, node, res string) (capacity, allocatable int64, err error) {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	c, a := n.Status.Capacity[corev1.ResourceName(res)], n.Status.Allocatable[corev1.ResourceName(res)]
	return c.Value(), a.Value(), nil
}

// waitAdvertised waits until the Node advertises capacity and
// allocatable of res.
func waitAdvertised(t *testing.T, cs kubernetes.Interface, node, res string, capacity, allocatable int64, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("node %s advertising %s %d/%d", node, res, capacity, allocatable), within, func() (bool, string) {
		c, a, err := advertised(cs, node, res)
		return err == nil && c == capacity && a == allocatable, fmt.Sprintf("advertises %d/%d (%v)", c, a, err)
	})
}

// waitUnschedulable waits until the scheduler says pod cannot be placed,
// for a reason containing why.
func waitUnschedulable(t *testing.T, cs kubernetes.Interface, pod, why string) {
	t.Helper()
	var last string
	testkit.Eventually(t, "pod "+pod+" to be unschedulable: "+why, time.Minute, func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				last = cond.Reason + ": " + cond.Message
				return cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable && strings.Contains(cond.Message, why), last
			}
		}
		return false, "no PodScheduled condition"
	})
	t.Logf("%s: %s", pod, last)
}

// containerID is the ID of pod's container, failing t unless it runs
// and never restarted.
func containerID(t *testing.T, cs kubernetes.Interface, pod string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s has container statuses %+v", pod, p.Status.ContainerStatuses)
	}
	st := p.Status.ContainerStatuses[0]
	if p.Status.Phase != corev1.PodRunning || st.State.Running == nil || st.RestartCount != 0 {
		t.Fatalf("pod %s is %s, container %+v restarted %d times", pod, p.Status.Phase, st.State, st.RestartCount)
	}
	return st.ContainerID
}

// bridgeCNI builds the CNI project's bridge and host-local plugins into
// dir and returns a BeforeKubelet installing them as the node's network
// (one node: a bridge and a subnet, no routes).
func bridgeCNI(t *testing.T, dir string) func(n *cluster.Node) error {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the bridge plugin: %v\n%s", err, out)
	}
	return func(n *cluster.Node) error {
		for _, p := range []string{"bridge", "host-local"} {
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err == nil {
				err = os.WriteFile(filepath.Join(n.CNIBinDir(), p), b, 0o755)
			}
			if err != nil {
				return err
			}
		}
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,
			"ipam":{"type":"host-local","subnet":"203.0.113.0/25","dataDir":%q}}]}`, filepath.Join(n.Dir, "host-local"))
		return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-pods.conflist"), []byte(conf), 0o644)
	}
}
