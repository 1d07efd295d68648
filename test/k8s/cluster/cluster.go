package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// CacheDir is where hack/k8s/setup.sh keeps the Kubernetes binaries.
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
	// ControlPlaneOnly runs no node at all (API tests).
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
}

// Cluster is a running test cluster. Its methods are safe for concurrent
// use only where they say so.
type Cluster struct {
	t    testing.TB
	Dir  string
	bin  string
	pki  *pki
	opts Options
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

	procs   []*proc
	sysctls map[string]string
}

// Bin returns the path of a Kubernetes binary of the cache, failing t
// when hack/k8s/setup.sh has not prepared it.
func Bin(t testing.TB, name string) string {
	t.Helper()
	ver, err := os.ReadFile(filepath.Join(CacheDir, "current"))
	if err != nil {
		t.Fatalf("no Kubernetes binaries: run hack/k8s/setup.sh (make k8s-setup) first: %v", err)
	}
	p := filepath.Join(CacheDir, strings.TrimSpace(string(ver)), "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run hack/k8s/setup.sh)", p, err)
	}
	return p
}

// Start brings up a cluster and stops it, leaving nothing behind, when
// the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	testns.Require(t)
	if o.Nodes == 0 && !o.ControlPlaneOnly {
		o.Nodes = 2
	}
	if o.ControlPlaneOnly {
		o.Nodes = 0
	}
	for _, b := range []string{"containerd", "runc", "ctr", "etcd"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is not installed: run hack/k8s/setup.sh (make k8s-setup) first", b)
		}
	}
	c := &Cluster{t: t, Dir: t.TempDir(), opts: o, Server: "https://" + APIServerIP + ":6443"}
	c.bin = filepath.Dir(Bin(t, "kube-apiserver"))
	c.Underlay = testns.New(t)
	testns.UnderlayBridge(t, c.Underlay, "ul0", fmt.Sprintf("%s/%d", APIServerIP, underlayLen))
	for i := range o.Nodes {
		n := &Node{c: c, Name: fmt.Sprintf("k%d", i+1), NS: testns.New(t), IP: fmt.Sprintf("192.0.2.%d", i+1)}
		n.Dir = filepath.Join(c.Dir, n.Name)
		peer := fmt.Sprintf("ulk%d", i+1)
		testns.Run(t, c.Underlay, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", n.NS)
		testns.Run(t, c.Underlay, "ip", "link", "set", peer, "master", "ul0", "up")
		testns.Run(t, n.NS, "ip", "addr", "add", fmt.Sprintf("%s/%d", n.IP, underlayLen), "dev", "eth0")
		testns.Run(t, n.NS, "ip", "link", "set", "eth0", "up")
		// Services and the outside world are reached through the
		// underlay's side of the node.
		testns.Run(t, n.NS, "ip", "route", "add", "default", "via", APIServerIP)
		c.Nodes = append(c.Nodes, n)
	}
	// Registered after the namespaces: it runs before they are deleted.
	t.Cleanup(c.Stop)
	c.recordSysctls()
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

// startControlPlane writes the PKI and starts etcd, the API server, the
// controller-manager and the scheduler in the underlay namespace.
func (c *Cluster) startControlPlane() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	issue := []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{APIServerIP, "10.96.0.1", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", "127.0.0.1"}},
		{"admin", "skiff-test-admin", []string{"system:masters"}, nil},
		{"kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
	}
	for _, n := range c.Nodes {
		issue = append(issue, struct {
			name, cn string
			orgs     []string
			hosts    []string
		}{"node-" + n.Name, "system:node:" + n.Name, []string{"system:nodes"}, nil})
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

	etcdPort := "2379"
	etcd, err := start(c.Dir, c.Underlay, "etcd", []string{"ETCD_UNSUPPORTED_ARCH="}, "etcd",
		"--name", "skiff-test", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:"+etcdPort, "--advertise-client-urls", "http://127.0.0.1:"+etcdPort,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "skiff-test=http://127.0.0.1:2380", "--log-level", "warn")
	if err != nil {
		return err
	}
	c.procs = append(c.procs, etcd)

	api, err := start(c.Dir, c.Underlay, "kube-apiserver", nil, filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:"+etcdPort,
		"--bind-address", APIServerIP, "--advertise-address", APIServerIP, "--secure-port", "6443",
		"--service-cluster-ip-range", ServiceCIDR,
		"--tls-cert-file", p.path("apiserver"), "--tls-private-key-file", p.keyPath("apiserver"),
		"--client-ca-file", p.path("ca"),
		"--kubelet-client-certificate", p.path("kubelet-client"), "--kubelet-client-key", p.keyPath("kubelet-client"),
		"--service-account-key-file", p.path("sa"), "--service-account-signing-key-file", p.keyPath("sa"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-preferred-address-types", "InternalIP", "--allow-privileged=true", "--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
		"--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	c.procs = append(c.procs, api)
	if err := c.waitAPI(api, 90*time.Second); err != nil {
		return err
	}

	cm, err := start(c.Dir, c.Underlay, "kube-controller-manager", nil, filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--service-account-private-key-file", p.keyPath("sa"), "--root-ca-file", p.path("ca"),
		"--cluster-signing-cert-file", p.path("ca"), "--cluster-signing-key-file", p.keyPath("ca"),
		"--use-service-account-credentials", "--leader-elect=false", "--allocate-node-cidrs=false",
		"--bind-address", "127.0.0.1", "--v=1")
	if err != nil {
		return err
	}
	sched, err := start(c.Dir, c.Underlay, "kube-scheduler", nil, filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authentication-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--authorization-kubeconfig", filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--v=1")
	if err != nil {
		return err
	}
	c.procs = append(c.procs, cm, sched)
	return nil
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

// Kubectl runs kubectl as the admin, in the underlay namespace, and
// returns its combined output. Safe for concurrent use.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlIn(c.Underlay, args...)
}

// KubectlIn runs kubectl as the admin in namespace ns.
func (c *Cluster) KubectlIn(ns string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/var/run/netns/" + ns, "--",
		filepath.Join(c.bin, "kubectl"), "--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MustKubectl is Kubectl, failing t on error.
func (c *Cluster) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
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

// WaitNodes waits until every node is registered, and Ready when ready
// is true (a node is Ready only once a CNI configuration is installed).
func (c *Cluster) WaitNodes(t testing.TB, within time.Duration, ready bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, err := c.Kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		ok := err == nil
		for _, n := range c.Nodes {
			if !strings.Contains(out, n.Name+"=") || (ready && !strings.Contains(out, n.Name+"=True")) {
				ok = false
			}
		}
		if ok {
			return
		}
		for _, n := range c.Nodes {
			if n.kubelet != nil && n.kubelet.exited() {
				t.Fatalf("kubelet of %s exited: %v\n%s", n.Name, n.kubelet.err, n.kubelet.tail(40))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not registered%s after %v:\n%s %v", map[bool]string{true: " and Ready"}[ready], within, out, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// WaitDefaultServiceAccount waits for the controller-manager to make the
// namespace's default ServiceAccount: pods are refused until it exists.
func (c *Cluster) WaitDefaultServiceAccount(t testing.TB, namespace string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := c.Kubectl("-n", namespace, "get", "serviceaccount", "default"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount in %s after a minute", namespace)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
