package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// referencePlugins builds the CNI project's bridge, host-local and
// loopback plugins into dir.
func referencePlugins(t *testing.T, dir string) {
	t.Helper()
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local", "github.com/containernetworking/plugins/plugins/main/loopback")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the reference plugins: %v\n%s", err, out)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// podSubnet is each node's pod subnet with the reference plugins.
var podSubnet = map[string]string{"k1": "203.0.113.0/25", "k2": "203.0.113.128/25"}

// installReference installs bridge + host-local as node n's network: a
// bridge cni0 per node, a subnet per node, routes between the nodes'
// subnets over the underlay (host-gw style).
func installReference(plugins string) func(n *cluster.Node) error {
	return func(n *cluster.Node) error {
		for _, p := range []string{"bridge", "host-local", "loopback"} {
			if err := copyFile(filepath.Join(plugins, p), filepath.Join(n.CNIBinDir(), p), 0o755); err != nil {
				return err
			}
		}
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ref","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"isDefaultGateway":true,"ipMasq":false,
			"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, podSubnet[n.Name], filepath.Join(n.Dir, "host-local"))
		if err := os.WriteFile(filepath.Join(n.CNIConfDir(), "10-ref.conflist"), []byte(conf), 0o644); err != nil {
			return err
		}
		for node, subnet := range podSubnet {
			if node == n.Name {
				continue
			}
			via := map[string]string{"k1": "192.0.2.1", "k2": "192.0.2.2"}[node]
			if out, err := n.Run("ip", "route", "add", subnet, "via", via); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
		}
		return nil
	}
}

func pod(name, node, command string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: probe, pod: %s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, command: ["/bin/sh", "-c", %q]}
---
`, name, name, node, command)
}

// TestClusterWithReferenceCNI brings up two nodes with the CNI project's
// bridge plugin as their network and kube-proxy, and checks what Skiff's
// own tests will stand on: pods on each node become Ready and reach each
// other (same node, across nodes, through a Service), exec and logs
// work, a privileged hostNetwork DaemonSet runs on both nodes and sees
// its node's own /var/lib/kubelet, a claim binds a hostPath volume, a
// kubelet restart keeps its pods, deleting the pods leaves the nodes
// clean, and stopping the cluster leaves nothing on the machine.
func TestClusterWithReferenceCNI(t *testing.T) {
	work := t.TempDir()
	pause, testpod := cluster.TestImages(t, work)
	plugins := filepath.Join(work, "plugins")
	referencePlugins(t, plugins)

	start := time.Now()
	c := cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: []string{pause, testpod},
		BeforeKubelet: installReference(plugins)})
	c.WaitNodesReady(t, 2*time.Minute)
	t.Logf("cluster start to nodes Ready: %v", time.Since(start))
	c.WaitDefaultServiceAccount(t, "default")

	created := time.Now()
	c.Apply(t, pod("a1", "k1", "echo started; exec sleep 3600"))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a1", "--timeout=120s")
	t.Logf("one pod created to Ready: %v", time.Since(created))
	created = time.Now()
	c.Apply(t, pod("a2", "k1", "exec probe serve --tcp 8080 --udp 8081")+pod("b1", "k2", "exec probe serve --tcp 8080 --udp 8081"))
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a2", "pod/b1", "--timeout=120s")
	t.Logf("two more pods created to Ready: %v", time.Since(created))
	ip := func(name string) string {
		return strings.TrimSpace(c.MustKubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}"))
	}
	a2, b1 := ip("a2"), ip("b1")
	if !strings.HasPrefix(a2, "203.0.113.") || !strings.HasPrefix(b1, "203.0.113.1") {
		t.Fatalf("pods have addresses a2=%q b1=%q, want them from the nodes' subnets", a2, b1)
	}
	c.MustKubectl(t, "exec", "a1", "--", "ping", "-c", "1", "-W", "2", a2)
	c.MustKubectl(t, "exec", "a1", "--", "probe", "tcp", a2+":8080", "--timeout", "2s")
	c.MustKubectl(t, "exec", "a1", "--", "probe", "udp", b1+":8081", "--timeout", "2s")
	for _, proto := range []string{"udp", "tcp"} {
		port := map[string]string{"udp": ":8081", "tcp": ":8080"}[proto]
		out := c.MustKubectl(t, "exec", "a1", "--", "probe", "flow", "--"+proto, b1+port, "--interval", "10ms", "--duration", "2s")
		var sent, received, lost, errs, gap int
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "sent=%d received=%d lost=%d errors=%d max_gap=%dms", &sent, &received, &lost, &errs, &gap); err != nil ||
			sent < 100 || lost != 0 || errs != 0 {
			t.Errorf("%s flow from a1 to b1: %q (%v), want 100+ messages, none lost", proto, out, err)
		}
	}
	if out, err := c.Kubectl("exec", "a1", "--", "probe", "tcp", b1+":9", "--timeout", "1s"); err == nil {
		t.Errorf("a probe to a closed port succeeded: %s", out)
	}
	if out := c.Logs(t, "default", "a1"); !strings.Contains(out, "started") {
		t.Errorf("logs of a1: %q", out)
	}
	if out := c.Logs(t, "default", "b1"); !strings.Contains(out, "serving tcp 8080") {
		t.Errorf("logs of b1: %q", out)
	}

	// A Service: kube-proxy of k1 sends a1's connection to b1 on k2.
	c.Apply(t, `apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {pod: b1}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`)
	vip := strings.TrimSpace(c.MustKubectl(t, "get", "service", "echo", "-o", "jsonpath={.spec.clusterIP}"))
	testkit.Eventually(t, "kube-proxy of k1 to program the service "+vip, time.Minute, func() (bool, string) {
		out, _ := c.Nodes[0].Run("iptables-save", "-t", "nat")
		return strings.Contains(out, vip+"/32") && strings.Contains(out, b1+":8080"), ""
	})
	c.MustKubectl(t, "exec", "a1", "--", "probe", "tcp", vip+":80", "--timeout", "2s")

	// A privileged hostNetwork DaemonSet, as Skiff's agent will be: it
	// has its node's address and sees its node's own /var/lib/kubelet.
	c.Apply(t, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: hostnet}
spec:
  selector: {matchLabels: {app: hostnet}}
  template:
    metadata: {labels: {app: hostnet}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      volumes: [{name: kubelet, hostPath: {path: /var/lib/kubelet, type: Directory}}]
      containers:
      - name: main
        image: skiff.local/testpod:dev
        imagePullPolicy: Never
        securityContext: {privileged: true}
        volumeMounts: [{name: kubelet, mountPath: /host/kubelet, mountPropagation: HostToContainer}]
        command: ["/bin/sh", "-c", "ip -o -4 addr show eth0; echo pods: $(ls /host/kubelet/pods); exec sleep 3600"]
`)
	c.MustKubectl(t, "rollout", "status", "daemonset/hostnet", "--timeout=120s")
	dsPods := map[string][2]string{} // node -> name, uid
	for _, line := range strings.Split(strings.TrimSpace(c.MustKubectl(t, "get", "pods", "-l", "app=hostnet", "-o",
		`jsonpath={range .items[*]}{.spec.nodeName} {.metadata.name} {.metadata.uid} {.status.podIP}{"\n"}{end}`)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[3] != c.Node(f[0]).IP {
			t.Fatalf("hostNetwork pod %q: want the node's address", line)
		}
		dsPods[f[0]] = [2]string{f[1], f[2]}
	}
	for node, p := range dsPods {
		other := dsPods[map[string]string{"k1": "k2", "k2": "k1"}[node]]
		logs := c.Logs(t, "default", p[0])
		if !strings.Contains(logs, p[1]) || strings.Contains(logs, other[1]) {
			t.Errorf("the DaemonSet's pod on %s sees in /var/lib/kubelet/pods: %q; want its own pod %s and not %s", node, logs, p[1], other[1])
		}
	}

	// A claim binds a hostPath PersistentVolume; the pod's write lands
	// in the volume's directory.
	dir := c.HostPathPV(t, "data", "1Gi")
	c.Apply(t, `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], storageClassName: "", volumeName: data, resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  nodeName: k2
  terminationGracePeriodSeconds: 1
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
  containers:
  - name: main
    image: skiff.local/testpod:dev
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo hello >/data/hello; exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
`)
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/writer", "--timeout=120s")
	if b, err := os.ReadFile(filepath.Join(dir, "hello")); err != nil || string(b) != "hello\n" {
		t.Errorf("the volume's directory holds %q, %v", b, err)
	}

	// The kubelet of k1 restarts: its pods stay, and it serves them.
	cid := c.MustKubectl(t, "get", "pod", "a1", "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	c.Nodes[0].RestartKubelet(t)
	c.MustKubectl(t, "exec", "a1", "--", "ping", "-c", "1", "-W", "2", a2)
	if now := c.MustKubectl(t, "get", "pod", "a1", "-o", "jsonpath={.status.containerStatuses[0].containerID}"); now != cid {
		t.Errorf("a1's container changed across the kubelet restart: %s -> %s", cid, now)
	}

	// Deleting every pod leaves no address, CNI cache entry, interface,
	// running task or pod network namespace on the nodes.
	c.MustKubectl(t, "delete", "pod", "a1", "a2", "b1", "writer", "--wait=true", "--timeout=60s")
	c.MustKubectl(t, "delete", "daemonset", "hostnet", "--cascade=foreground", "--wait=true", "--timeout=60s")
	for _, n := range c.Nodes {
		testkit.Eventually(t, n.Name+" to have no running task", 30*time.Second, func() (bool, string) {
			out, err := n.Ctr("tasks", "ls", "-q")
			return err == nil && strings.TrimSpace(out) == "", ""
		})
		ents, _ := os.ReadDir(filepath.Join(n.Dir, "host-local", "ref"))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "203.") {
				t.Errorf("%s: host-local still holds %s", n.Name, e.Name())
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(n.CNICacheDir(), "results")); len(ents) > 0 {
			t.Errorf("%s: libcni's cache still holds %v", n.Name, ents)
		}
		if out := n.MustRun(t, "ip", "-o", "link", "show", "master", "cni0"); strings.TrimSpace(out) != "" {
			t.Errorf("%s: pod interfaces left on cni0: %s", n.Name, out)
		}
		if m := mountsUnder(t, n.Dir); strings.Contains(m, "nsfs") {
			t.Errorf("%s: pod network namespaces still mounted:\n%s", n.Name, m)
		}
	}

	// Stopping the cluster leaves nothing: no process, mount, cgroup,
	// namespace or directory.
	c.Stop()
	if _, err := os.Stat(c.Dir); err == nil {
		t.Errorf("%s is still there", c.Dir)
	}
	if m := mountsUnder(t, c.Dir); m != "" {
		t.Errorf("mounts left:\n%s", m)
	}
	for _, ns := range []string{c.Underlay, c.Nodes[0].NS, c.Nodes[1].NS} {
		if _, err := os.Stat(testkit.Path(ns)); err == nil {
			t.Errorf("namespace %s is still there", ns)
		}
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat("/sys/fs/cgroup/memory" + n.CgroupRoot()); err == nil {
			t.Errorf("cgroup %s is still there", n.CgroupRoot())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), c.Dir) {
			t.Errorf("process %s still runs: %s", filepath.Dir(p), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// mountsUnder is the lines of the test's mountinfo with a mount point
// under dir.
func mountsUnder(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
