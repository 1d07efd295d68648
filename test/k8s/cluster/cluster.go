package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// CacheDir is where hack/k8s/setup.sh keeps the Kubernetes binaries when
// SKIFF_K8S_CACHE does not say otherwise.
const CacheDir = "/var/cache/skiff-k8s"

// Addresses of the test cluster. The underlay is a bridge in a namespace
// of its own; nothing is put in the machine's root namespace.
const (
	APIServerIP = "192.0.2.254"
	ServiceCIDR = "10.96.0.0/16"
	underlayLen = 24
)

// Options shape a cluster.
type Options struct {
	// Nodes is how many worker nodes to run (each a network namespace
	// with its own containerd and kubelet); 2 when 0.
	Nodes int
	// ControlPlaneOnly runs no node at all (API tests, many pods
	// created in the API server without kubelets).
	ControlPlaneOnly bool
	// KubeProxy runs kube-proxy (iptables mode) on every node.
	KubeProxy bool
	// Images are docker-archive tarballs imported into every node's
	// containerd before its kubelet starts.
	Images []string
	// BeforeKubelet, when set, runs for each node once its containerd
	// is up and before its kubelet starts (to install a CNI plugin into
	// the node's CNI directories, for example).
	BeforeKubelet func(n *Node) error
	// Extra arguments of the control plane's programs and the kubelets
	// (later flags win), and lines added to every kubelet's
	// KubeletConfiguration (YAML, top level: "nodeStatusUpdateFrequency: 1s").
	APIServerArgs, ControllerManagerArgs, SchedulerArgs, KubeletArgs []string
	KubeletConfig                                                    string
}

// Cluster is a running test cluster. Kubectl and the Node methods that
// run commands are safe for concurrent use; starting and stopping
// processes is not.
type Cluster struct {
	t    testing.TB
	id   string
	rec  record
	bin  string
	pki  *pki
	opts Options
	// Dir holds everything of the cluster (certificates, logs, the
	// nodes' directories); it is removed when the cluster stops.
	Dir string
	// Underlay is the namespace holding the underlay bridge and the
	// control plane (etcd, kube-apiserver, controller-manager,
	// scheduler) at APIServerIP.
	Underlay string
	// Kubeconfig is an admin (system:masters) kubeconfig. Programs that
	// use it run inside Underlay or a node namespace (Kubectl, Node.Run):
	// the API server listens on the underlay only.
	Kubeconfig string
	Server     string
	Nodes      []*Node

	procs    []*proc
	stopped  bool
	loopback string // the CNI project's loopback plugin, for every node
}

// binDir is the directory of the Kubernetes binaries setup prepared.
func binDir() (string, error) {
	cache := os.Getenv("SKIFF_K8S_CACHE")
	if cache == "" {
		cache = CacheDir
	}
	ver, err := os.ReadFile(filepath.Join(cache, "current"))
	if err != nil {
		return "", fmt.Errorf("no Kubernetes binaries: run hack/k8s/setup.sh (make k8s-setup) first: %w", err)
	}
	dir := filepath.Join(cache, strings.TrimSpace(string(ver)))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return "", fmt.Errorf("Kubernetes binaries in %s are incomplete: run hack/k8s/setup.sh (make k8s-setup): %w", dir, err)
	}
	return filepath.Join(dir, "bin"), nil
}

// Bin returns the path of a Kubernetes binary of the cache, failing t
// when hack/k8s/setup.sh has not prepared it.
func Bin(t testing.TB, name string) string {
	t.Helper()
	dir, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run hack/k8s/setup.sh)", p, err)
	}
	return p
}

// Start brings up a cluster, and stops it, leaving nothing behind, when
// the test ends (Stop). A cluster whose test process died without
// stopping it is cleaned up by the next Start on the machine.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	testkit.Require(t)
	if o.ControlPlaneOnly {
		o.Nodes = 0
	} else if o.Nodes == 0 {
		o.Nodes = 2
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "etcd", "iptables", "conntrack", "nsenter", "unshare", "findmnt"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is not installed: run hack/k8s/setup.sh (make k8s-setup) first", b)
		}
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		Bin(t, b)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	c := &Cluster{t: t, id: id, opts: o, Server: "https://" + APIServerIP + ":6443",
		Dir: filepath.Join(os.TempDir(), "sk8-"+id), Underlay: "sk8-" + id + "-ul"}
	c.bin = filepath.Dir(Bin(t, "kube-apiserver"))
	for i := range o.Nodes {
		name := fmt.Sprintf("k%d", i+1)
		n := &Node{c: c, Name: name, NS: "sk8-" + id + "-" + name, IP: fmt.Sprintf("192.0.2.%d", i+1)}
		n.Dir = filepath.Join(c.Dir, name)
		c.Nodes = append(c.Nodes, n)
	}
	// Recorded before anything is made: whatever is made from here on
	// goes, even if this process dies.
	c.rec = record{ID: id, PID: os.Getpid(), Started: processStart(os.Getpid()), Dir: c.Dir, Cgroup: "/skiff-k8s-" + id,
		Netns: []string{c.Underlay}}
	for _, n := range c.Nodes {
		c.rec.Netns = append(c.rec.Netns, n.NS)
	}
	stale, err := register(c.rec)
	if stale != nil {
		t.Logf("cluster: left behind by earlier test processes, not cleaned up: %v", stale)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.setup(); err != nil {
		t.Fatal(err)
	}
	if err := c.startControlPlane(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Nodes) > 0 {
		c.WaitNodes(t, 3*time.Minute, false)
	}
	return c
}

// setup makes the cluster's directory, cgroups and namespaces: the
// underlay bridge and a veth from it into every node's namespace.
func (c *Cluster) setup() error {
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := shareDir(c.Dir); err != nil {
		return err
	}
	if len(c.Nodes) > 0 {
		// containerd 1.6 sets up every sandbox's lo with the CNI
		// loopback plugin, which a node's provisioning installs.
		build := exec.Command("go", "build", "-o", c.Dir+"/", "github.com/containernetworking/plugins/plugins/main/loopback")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("cluster: building the CNI loopback plugin: %v\n%s", err, out)
		}
		c.loopback = filepath.Join(c.Dir, "loopback")
	}
	if err := makeCgroup(c.rec.Cgroup + "/control"); err != nil {
		return err
	}
	run := func(ns string, args ...string) error {
		if out, err := testkit.Try(ns, args...); err != nil {
			return fmt.Errorf("cluster: in %s: %s: %v: %s", ns, strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, ns := range c.rec.Netns {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			return fmt.Errorf("cluster: ip netns add %s: %v: %s", ns, err, out)
		}
		if err := run(ns, "ip", "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	if err := run(c.Underlay, append([]string{"ip"}, testkit.UnderlayBridgeArgs("ul0")...)...); err != nil {
		return err
	}
	if err := run(c.Underlay, "ip", "addr", "add", fmt.Sprintf("%s/%d", APIServerIP, underlayLen), "dev", "ul0"); err != nil {
		return err
	}
	if err := run(c.Underlay, "ip", "link", "set", "ul0", "up"); err != nil {
		return err
	}
	for i, n := range c.Nodes {
		peer := fmt.Sprintf("ulk%d", i+1)
		for _, args := range [][]string{
			{c.Underlay, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
			{c.Underlay, "ip", "link", "set", peer, "master", "ul0", "up"},
			{n.NS, "ip", "addr", "add", fmt.Sprintf("%s/%d", n.IP, underlayLen), "dev", "eth0"},
			{n.NS, "ip", "link", "set", "eth0", "up"},
			// Services and the control plane are reached through the
			// underlay's side of the node.
			{n.NS, "ip", "route", "add", "default", "via", APIServerIP},
		} {
			if err := run(args[0], args[1:]...); err != nil {
				return err
			}
		}
		n.link = peer
		for _, g := range []string{"/node", "/pods"} {
			if err := makeCgroup(c.rec.Cgroup + "/" + n.Name + g); err != nil {
				return err
			}
		}
	}
	return nil
}

// startControlPlane writes the PKI and starts etcd, the API server, the
// controller-manager and the scheduler in the underlay namespace.
func (c *Cluster) startControlPlane() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	type cert struct {
		name, cn string
		orgs     []string
		hosts    []string
	}
	issue := []cert{
		{"apiserver", "kube-apiserver", nil, []string{APIServerIP, "10.96.0.1", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", "127.0.0.1"}},
		{"admin", "skiff-test-admin", []string{"system:masters"}, nil},
		{"kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
	}
	for _, n := range c.Nodes {
		issue = append(issue, cert{"node-" + n.Name, "system:node:" + n.Name, []string{"system:nodes"}, nil})
	}
	for _, i := range issue {
		if err := p.issue(i.name, i.cn, i.orgs, i.hosts...); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	for _, k := range []string{"admin", "controller-manager", "scheduler", "kube-proxy"} {
		if err := p.kubeconfig(filepath.Join(c.Dir, k+".kubeconfig"), c.Server, k); err != nil {
			return err
		}
	}
	run := func(name string, env []string, args ...string) (*proc, error) {
		pr, err := start(spec{name: name, dir: c.Dir, group: c.rec.Cgroup + "/control",
			enter: []string{"--net=" + testkit.Path(c.Underlay)}, env: env, args: args})
		if err == nil {
			c.procs = append(c.procs, pr)
		}
		return pr, err
	}
	if _, err := run("etcd", []string{"ETCD_UNSUPPORTED_ARCH="}, "etcd",
		"--name", "skiff-test", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "skiff-test=http://127.0.0.1:2380", "--log-level", "warn"); err != nil {
		return err
	}
	api, err := run("kube-apiserver", nil, append([]string{filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", APIServerIP, "--advertise-address", APIServerIP, "--secure-port", "6443",
		"--service-cluster-ip-range", ServiceCIDR,
		"--tls-cert-file", p.path("apiserver"), "--tls-private-key-file", p.keyPath("apiserver"),
		"--client-ca-file", p.path("ca"),
		"--kubelet-client-certificate", p.path("kubelet-client"), "--kubelet-client-key", p.keyPath("kubelet-client"),
		"--service-account-key-file", p.path("sa"), "--service-account-signing-key-file", p.keyPath("sa"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-preferred-address-types", "InternalIP", "--allow-privileged=true", "--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
		"--profiling=false", "--v=1"}, c.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	if err := c.waitAPI(api, 90*time.Second); err != nil {
		return err
	}
	if _, err := run("kube-controller-manager", nil, append([]string{filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--service-account-private-key-file", p.keyPath("sa"), "--root-ca-file", p.path("ca"),
		"--cluster-signing-cert-file", p.path("ca"), "--cluster-signing-key-file", p.keyPath("ca"),
		"--use-service-account-credentials", "--leader-elect=false", "--allocate-node-cidrs=false",
		"--bind-address", "127.0.0.1", "--v=1"}, c.opts.ControllerManagerArgs...)...); err != nil {
		return err
	}
	_, err = run("kube-scheduler", nil, append([]string{filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--v=1"}, c.opts.SchedulerArgs...)...)
	return err
}

// waitAPI waits until the API server answers /readyz.
func (c *Cluster) waitAPI(api *proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		out, err := c.Kubectl("get", "--raw", "/readyz")
		if err == nil && strings.TrimSpace(out) == "ok" {
			return nil
		}
		if api.exited() {
			return fmt.Errorf("cluster: kube-apiserver exited: %v\n%s", api.err, api.tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: kube-apiserver not ready after %v: %s\n%s", within, out, api.tail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// ImportImage imports a docker-archive tarball into every node's
// containerd, for pods with imagePullPolicy Never.
func (c *Cluster) ImportImage(file string) error {
	for _, n := range c.Nodes {
		if err := n.ImportImage(file); err != nil {
			return err
		}
	}
	return nil
}

// Kubectl runs kubectl as the admin, in the underlay namespace, and
// returns its combined output.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlIn(c.Underlay, args...)
}

// KubectlIn runs kubectl as the admin in namespace ns.
func (c *Cluster) KubectlIn(ns string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + testkit.Path(ns), "--",
		filepath.Join(c.bin, "kubectl"), "--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), err
}

// MustKubectl is Kubectl, failing t on error.
func (c *Cluster) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// Apply applies YAML documents with kubectl.
func (c *Cluster) Apply(t testing.TB, yaml string) {
	t.Helper()
	f, err := os.CreateTemp(c.Dir, "apply-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(yaml)
	f.Close()
	c.MustKubectl(t, "apply", "-f", f.Name())
}

// Logs returns a pod's container logs (kubectl logs; args such as
// "-c", "name" or "--previous" are added).
func (c *Cluster) Logs(t testing.TB, namespace, pod string, args ...string) string {
	t.Helper()
	out, _ := c.Kubectl(append([]string{"-n", namespace, "logs", pod}, args...)...)
	return out
}

// HostPathPV creates a PersistentVolume of no storage class backed by a
// directory of the cluster (every node shares the machine's filesystem)
// and returns the directory. A claim with storageClassName "" binds it.
func (c *Cluster) HostPathPV(t testing.TB, name, size string) string {
	t.Helper()
	dir := filepath.Join(c.Dir, "pv", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %s}
spec:
  capacity: {storage: %s}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: %q, type: Directory}
`, name, size, dir))
	return dir
}

// WaitNodes waits until every node is registered, and Ready when ready
// is true (a node is Ready only once a CNI configuration is installed).
func (c *Cluster) WaitNodes(t testing.TB, within time.Duration, ready bool) {
	t.Helper()
	testkit.Eventually(t, "nodes registered"+map[bool]string{true: " and Ready"}[ready], within, func() (bool, string) {
		out, err := c.Kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		ok := err == nil
		for _, n := range c.Nodes {
			if !strings.Contains(out, n.Name+"=") || (ready && !strings.Contains(out, n.Name+"=True")) {
				ok = false
			}
		}
		if !ok {
			for _, n := range c.Nodes {
				if n.kubelet != nil && n.kubelet.exited() {
					t.Fatalf("kubelet of %s exited: %v\n%s", n.Name, n.kubelet.err, n.kubelet.tail(40))
				}
			}
		}
		return ok, fmt.Sprintf("\n%s %v", out, err)
	})
}

// WaitNodesReady waits until every node is Ready.
func (c *Cluster) WaitNodesReady(t testing.TB, within time.Duration) { c.WaitNodes(t, within, true) }

// WaitDefaultServiceAccount waits for the controller-manager to make the
// namespace's default ServiceAccount: pods are refused until it exists.
func (c *Cluster) WaitDefaultServiceAccount(t testing.TB, namespace string) {
	t.Helper()
	testkit.Eventually(t, "the default ServiceAccount in "+namespace, time.Minute, testkit.NoError(func() error {
		_, err := c.Kubectl("-n", namespace, "get", "serviceaccount", "default")
		return err
	}))
}
