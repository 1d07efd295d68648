package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/images"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const hostPod = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  nodeName: k1
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, command: ["sleep", "3600"]}
`

// TestNodePowerAndLink: a node powered off loses every process and mount
// but its namespace holder, and powered on runs its pod again; a node
// whose underlay link is down cannot reach the control plane.
func TestNodePowerAndLink(t *testing.T) {
	dir := t.TempDir()
	pause, testpod := TestImages(t, dir)
	c := Start(t, Options{Nodes: 1, Images: []string{pause, testpod}})
	// One archive, two tags: containerd gets both.
	twice := filepath.Join(dir, "twice.tar")
	if err := images.Write("pause", dir, twice, "skiff.local/a:1", "skiff.local/b:2"); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(twice); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Nodes[0].Ctr("images", "ls", "-q"); err != nil || !strings.Contains(out, "skiff.local/a:1\n") || !strings.Contains(out, "skiff.local/b:2\n") {
		t.Errorf("images after importing one archive with two tags: %v\n%s", err, out)
	}
	c.WaitDefaultServiceAccount(t, "default")
	c.Apply(t, hostPod) // host network: the node needs no CNI
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/p", "--timeout=120s")
	cid := c.MustKubectl(t, "get", "pod", "p", "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	n := c.Nodes[0]

	if err := n.PowerOff(); err != nil {
		t.Fatal(err)
	}
	if pids := cgroupPids(n.CgroupRoot()); len(pids) > 0 {
		t.Errorf("processes %v still in the pods' cgroup", pids)
	}
	if pids := cgroupPids(n.group()); len(pids) != 1 || pids[0] != n.holder.pid() {
		t.Errorf("node processes %v, want only the holder %d", pids, n.holder.pid())
	}
	if m, _ := mountsUnder(n.Dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if err := n.PowerOn(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "pod p running again after power on", 2*time.Minute, func() (bool, string) {
		out, _ := c.Kubectl("get", "pod", "p", "-o", `jsonpath={.status.containerStatuses[0].containerID} {.status.conditions[?(@.type=="Ready")].status}`)
		f := strings.Fields(out)
		return len(f) == 2 && f[0] != cid && f[1] == "True", fmt.Sprintf("%q (was %s)", out, cid)
	})

	n.MustRun(t, "ping", "-c", "1", "-W", "2", APIServerIP)
	if err := n.SetLink(false); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Run("ping", "-c", "1", "-W", "1", APIServerIP); err == nil {
		t.Errorf("link down, yet the control plane answers: %s", out)
	}
	if err := n.SetLink(true); err != nil {
		t.Fatal(err)
	}
	n.MustRun(t, "ping", "-c", "1", "-W", "2", APIServerIP)
}

// TestDeadTestProcess: a test process killed while its cluster runs
// (a go test timeout does that) leaves containers, shims, mounts,
// cgroups and namespaces behind; the next cluster started on the machine
// removes them all.
func TestDeadTestProcess(t *testing.T) {
	if file := os.Getenv("SKIFF_K8S_DEAD_HELPER"); file != "" {
		deadHelper(t, file)
		return
	}
	file := filepath.Join(t.TempDir(), "record.json")
	helper := exec.Command(os.Args[0], "-test.run=^TestDeadTestProcess$", "-test.v")
	helper.Env = append(os.Environ(), "SKIFF_K8S_DEAD_HELPER="+file)
	out, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	helper.Stdout, helper.Stderr = out, out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	var r record
	testkit.Eventually(t, "the helper's cluster up", 3*time.Minute, func() (bool, string) {
		if b, err := os.ReadFile(file); err == nil && json.Unmarshal(b, &r) == nil {
			return true, ""
		}
		b, _ := os.ReadFile(out.Name())
		return false, "\n" + string(b)
	})
	_ = helper.Process.Signal(syscall.SIGKILL)
	_ = helper.Wait()

	// What the dead process left: the pod's container, its pause and
	// shim outlive it (they are not its children), with their mounts.
	deadline := time.Now().Add(10 * time.Second)
	for len(cgroupPids(r.Cgroup)) != 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the rest dies of Pdeathsig
	}
	if pids := cgroupPids(r.Cgroup); len(pids) != 3 {
		t.Errorf("processes left by the dead test: %v, want 3 (shim, pause, the container)", pids)
	}
	if m, _ := mountsUnder(r.Dir); len(m) == 0 {
		t.Error("no mount left by the dead test")
	}

	Start(t, Options{ControlPlaneOnly: true})
	if pids := cgroupPids(r.Cgroup); len(pids) > 0 {
		t.Errorf("processes %v still there", pids)
	}
	for _, h := range hierarchies() {
		if _, err := os.Stat(filepath.Join(h.mount, r.Cgroup)); err == nil {
			t.Errorf("cgroup %s still in %s", r.Cgroup, h.mount)
		}
	}
	if m, _ := mountsUnder(r.Dir); len(m) > 0 {
		t.Errorf("mounts still there: %v", m)
	}
	for _, ns := range r.Netns {
		if _, err := os.Stat(testkit.Path(ns)); err == nil {
			t.Errorf("namespace %s still there", ns)
		}
	}
	for _, f := range []string{r.Dir, filepath.Join(stateDir, "clusters", r.ID+".json")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s still there", f)
		}
	}
}

// deadHelper runs a one-node cluster with a pod, writes its record to
// file, and waits to be killed.
func deadHelper(t *testing.T, file string) {
	// The images go beside the record, in the parent's temporary
	// directory: this process is killed, so its own would never be
	// removed.
	dir := filepath.Join(filepath.Dir(file), "images")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	pause, testpod := TestImages(t, dir)
	c := Start(t, Options{Nodes: 1, Images: []string{pause, testpod}})
	c.WaitDefaultServiceAccount(t, "default")
	c.Apply(t, hostPod)
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/p", "--timeout=120s")
	if err := writeJSON(file, c.rec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Hour) // until the test kills this process
}
