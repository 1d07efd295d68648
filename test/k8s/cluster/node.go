package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// Node is a worker: a network namespace on the underlay and a mount
// namespace of its own, with its own containerd and kubelet (and
// kube-proxy with Options.KubeProxy).
//
// In its mount namespace the paths the kubelet and containerd use
// whatever their flags say are the node's own, bound from its directory:
// /var/lib/kubelet (its --root-dir: device plugins, pod resources),
// /var/lib/cni (libcni's cache), /var/log/containers and /run/containerd
// (runc's state, the shims' sockets). Everything else is the machine's,
// and the cluster's directory is shared: mounts made under it on a node
// (pod volumes, pod network namespaces) are seen everywhere.
type Node struct {
	c *Cluster
	// Name is the node's name in Kubernetes.
	Name string
	// NS is its network namespace (testkit.Path(NS)).
	NS string
	// IP is its underlay address, the Node's InternalIP.
	IP string
	// Dir holds its containerd, kubelet and CNI directories and logs.
	Dir string

	link                               string // its port on the underlay bridge
	holder, containerd, kubelet, proxy *proc
}

// CNIBinDir and CNIConfDir are where the node's runtime looks for CNI
// plugins and configurations.
func (n *Node) CNIBinDir() string  { return filepath.Join(n.Dir, "cni", "bin") }
func (n *Node) CNIConfDir() string { return filepath.Join(n.Dir, "cni", "net.d") }

// CNICacheDir is libcni's cache of the node (/var/lib/cni on the node).
func (n *Node) CNICacheDir() string { return filepath.Join(n.Dir, "host", "cni") }

// ContainerdSocket is the node's containerd socket.
func (n *Node) ContainerdSocket() string { return filepath.Join(n.Dir, "containerd.sock") }

// KubeletDir is the kubelet's --root-dir, /var/lib/kubelet on the node
// (device-plugins/, pod-resources/).
func (n *Node) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// CgroupRoot is the kubelet's cgroup root: the node's pods live under it.
func (n *Node) CgroupRoot() string { return n.c.rec.Cgroup + "/" + n.Name + "/pods" }

// group is the cgroup of the node's own processes.
func (n *Node) group() string { return n.c.rec.Cgroup + "/" + n.Name + "/node" }

// LogFile is the log of one of the node's programs (containerd, kubelet,
// kube-proxy).
func (n *Node) LogFile(program string) string { return filepath.Join(n.Dir, program+".log") }

// enter are nsenter's arguments into the node's namespaces.
func (n *Node) enter() []string {
	return []string{"-t", strconv.Itoa(n.holder.pid()), "-n", "-m"}
}

// Run runs a command in the node's network and mount namespaces and
// returns its combined output. Safe for concurrent use.
func (n *Node) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n.holder.exited() {
		return "", fmt.Errorf("cluster: node %s: its namespace holder is gone", n.Name)
	}
	out, err := exec.CommandContext(ctx, "nsenter", append(append(n.enter(), "--"), args...)...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("on %s: %s: %w", n.Name, strings.Join(args, " "), err)
	}
	return string(out), err
}

// MustRun is Run, failing t on error.
func (n *Node) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// holderScript runs in the node's new mount namespace: it binds the
// node's directories over the paths the kubelet and containerd use
// whatever their flags say, and keeps the namespaces (the node's
// programs enter them through it). The mounts holding those paths are
// made slaves first, so that the binds do not propagate to the machine.
const holderScript = `set -e
d=$1
for t in /var/lib/kubelet /var/lib/cni /var/log/containers /run/containerd; do
	mount --make-slave "$(findmnt -n -o TARGET --target "$t")"
done
mount --bind "$d/kubelet" /var/lib/kubelet
mount --bind "$d/host/cni" /var/lib/cni
mount --bind "$d/host/containers" /var/log/containers
mount --bind "$d/host/run" /run/containerd
: >"$d/holder.ready"
exec sleep infinity
`

const containerdConfig = `version = 2
root = "{{dir}}/containerd/root"
state = "{{dir}}/containerd/state"
oom_score = 0
[grpc]
  address = "{{dir}}/containerd.sock"
[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"
[debug]
  address = "{{dir}}/containerd-debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{dir}}/cni/bin"
    conf_dir = "{{dir}}/cni/net.d"
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "{{ca}}"}
authorization: {mode: AlwaysAllow}
address: "{{ip}}"
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
cgroupRoot: "{{cgroup}}"
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://{{dir}}/containerd.sock"
podLogsDir: "{{dir}}/pod-logs"
clusterDomain: cluster.local
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
protectKernelDefaults: false
maxPods: 110
`

func (n *Node) expand(tmpl string) string {
	return strings.NewReplacer("{{dir}}", n.Dir, "{{ca}}", n.c.pki.path("ca"), "{{ip}}", n.IP, "{{cgroup}}", n.CgroupRoot()).Replace(tmpl)
}

// start makes the node's namespaces and files, starts its containerd,
// imports the images, runs BeforeKubelet, and starts its kubelet (and
// kube-proxy).
func (n *Node) start() error {
	c := n.c
	for _, d := range []string{n.CNIBinDir(), n.CNIConfDir(), n.KubeletDir(), filepath.Join(n.Dir, "pod-logs"),
		n.CNICacheDir(), filepath.Join(n.Dir, "host", "containers"), filepath.Join(n.Dir, "host", "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd.toml"), []byte(n.expand(containerdConfig)), 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	cfg := n.expand(kubeletConfig) + c.opts.KubeletConfig
	if err := os.WriteFile(filepath.Join(n.Dir, "kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := c.pki.kubeconfig(filepath.Join(n.Dir, "kubelet.kubeconfig"), c.Server, "node-"+n.Name); err != nil {
		return err
	}
	if err := n.startHolder(); err != nil {
		return err
	}
	// containerd 1.6 sets up every sandbox's lo with the CNI loopback
	// plugin, which a node's provisioning installs (kubernetes-cni).
	if err := copyFile(c.loopback, filepath.Join(n.CNIBinDir(), "loopback"), 0o755); err != nil {
		return err
	}
	if err := n.StartContainerd(); err != nil {
		return err
	}
	for _, img := range c.opts.Images {
		if err := n.ImportImage(img); err != nil {
			return err
		}
	}
	if c.opts.BeforeKubelet != nil {
		if err := c.opts.BeforeKubelet(n); err != nil {
			return fmt.Errorf("cluster: node %s: %w", n.Name, err)
		}
	}
	if err := n.StartKubelet(); err != nil {
		return err
	}
	if c.opts.KubeProxy {
		return n.StartProxy()
	}
	return nil
}

// startHolder starts the process that holds the node's mount namespace.
func (n *Node) startHolder() error {
	p, err := start(spec{name: "holder", dir: n.Dir, group: n.group(), enter: []string{"--net=" + testkit.Path(n.NS)},
		args: []string{"unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", holderScript, "holder", n.Dir}})
	if err != nil {
		return err
	}
	n.holder = p
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(n.Dir, "holder.ready")); err == nil {
			return nil
		}
		if p.exited() || time.Now().After(deadline) {
			return fmt.Errorf("cluster: node %s: its mount namespace is not up: %v\n%s", n.Name, p.err, p.tail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts one of the node's programs in its namespaces and cgroup.
func (n *Node) run(name string, args ...string) (*proc, error) {
	return start(spec{name: name, dir: n.Dir, group: n.group(), enter: n.enter(), args: args})
}

// StartContainerd starts the node's containerd and waits for its socket.
func (n *Node) StartContainerd() error {
	p, err := n.run("containerd", "containerd", "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.containerd = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, err := n.Ctr("version"); err == nil && strings.Contains(out, "Server:") {
			return nil
		}
		if p.exited() || time.Now().After(deadline) {
			return fmt.Errorf("cluster: containerd of %s not up: %v\n%s", n.Name, p.err, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopContainerd stops the node's containerd (SIGTERM); running
// containers stay (their shims hold them).
func (n *Node) StopContainerd() { n.containerd.stop(10 * time.Second) }

// KillContainerd kills the node's containerd (SIGKILL); running
// containers stay.
func (n *Node) KillContainerd() { n.containerd.kill() }

// Ctr runs ctr against the node's containerd, in the k8s.io namespace.
func (n *Node) Ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.ContainerdSocket(), "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("ctr %s on %s: %w", strings.Join(args, " "), n.Name, err)
	}
	return string(out), err
}

// ImportImage imports a docker-archive tarball into the node's
// containerd, for pods with imagePullPolicy Never.
func (n *Node) ImportImage(file string) error {
	if out, err := n.Ctr("images", "import", file); err != nil {
		return fmt.Errorf("cluster: importing %s: %w\n%s", file, err, out)
	}
	return nil
}

// StartKubelet starts the node's kubelet.
func (n *Node) StartKubelet() error {
	p, err := n.run("kubelet", append([]string{filepath.Join(n.c.bin, "kubelet"),
		"--config", filepath.Join(n.Dir, "kubelet.yaml"), "--kubeconfig", filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--root-dir", n.KubeletDir(), "--hostname-override", n.Name, "--node-ip", n.IP, "--v=1"}, n.c.opts.KubeletArgs...)...)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// StopKubelet stops the node's kubelet (SIGTERM); its pods keep running.
func (n *Node) StopKubelet() { n.kubelet.stop(15 * time.Second) }

// KillKubelet kills the node's kubelet (SIGKILL); its pods keep running.
func (n *Node) KillKubelet() { n.kubelet.kill() }

// RestartKubelet stops the node's kubelet, starts it again and waits
// until it serves every pod bound to the node (WaitKubelet).
func (n *Node) RestartKubelet(t testing.TB) {
	t.Helper()
	n.StopKubelet()
	if err := n.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	n.WaitKubelet(t, time.Minute)
}

// KubeletLog is the node's kubelet log so far.
func (n *Node) KubeletLog() string {
	b, _ := os.ReadFile(n.LogFile("kubelet"))
	return string(b)
}

// StartProxy starts kube-proxy (iptables mode) on the node.
func (n *Node) StartProxy() error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
bindAddress: %s
mode: iptables
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, filepath.Join(n.c.Dir, "kube-proxy.kubeconfig"), n.Name, n.IP)
	file := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	p, err := n.run("kube-proxy", filepath.Join(n.c.bin, "kube-proxy"), "--config", file, "--v=1")
	if err != nil {
		return err
	}
	n.proxy = p
	return nil
}

// StopProxy stops the node's kube-proxy (its rules stay).
func (n *Node) StopProxy() { n.proxy.stop(10 * time.Second) }

// PowerOff stops the node as a power cut would: its kubelet, kube-proxy,
// containerd, shims and every container are killed, the mounts under
// its directory (pod volumes and network namespaces, container root
// filesystems) go, and its volatile state (what would be on tmpfs:
// containerd's state, runc's, the shims') is emptied. Its disk stays
// (images, the kubelet's directory, CNI files), and so does its network
// namespace with what is in it. PowerOn starts it again.
func (n *Node) PowerOff() error {
	n.proxy.kill()
	n.kubelet.kill()
	keep := n.holder.pid()
	var errs []error
	if err := killCgroup(n.CgroupRoot()); err != nil {
		errs = append(errs, err)
	}
	for range 100 {
		pids := slices.DeleteFunc(cgroupPids(n.group()), func(p int) bool { return p == keep })
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.containerd.kill()
	if err := unmountUnder(n.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{filepath.Join(n.Dir, "containerd", "state"), filepath.Join(n.Dir, "host", "run")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster: powering %s off: %v", n.Name, errs)
	}
	return nil
}

// PowerOn starts a node PowerOff stopped: containerd, the kubelet and,
// with Options.KubeProxy, kube-proxy.
func (n *Node) PowerOn() error {
	if err := n.StartContainerd(); err != nil {
		return err
	}
	if err := n.StartKubelet(); err != nil {
		return err
	}
	if n.c.opts.KubeProxy {
		return n.StartProxy()
	}
	return nil
}

// SetLink takes the node's underlay link down (false) or up (true): a
// cable pulled, the node cut off from the control plane and the others.
func (n *Node) SetLink(up bool) error {
	state := map[bool]string{true: "up", false: "down"}[up]
	if out, err := exec.Command("ip", "-n", n.c.Underlay, "link", "set", n.link, state).CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: link of %s %s: %v: %s", n.Name, state, err, out)
	}
	return nil
}

// WaitKubelet waits until the node's kubelet answers its health check
// and knows every pod the API server has bound to the node: a restarted
// kubelet serves exec and logs for them from then on.
func (n *Node) WaitKubelet(t testing.TB, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, "kubelet of "+n.Name+" back", within, func() (bool, string) {
		ok, why := n.kubeletSynced()
		if !ok && n.kubelet.exited() {
			t.Fatalf("kubelet of %s exited: %v\n%s", n.Name, n.kubelet.err, n.kubelet.tail(40))
		}
		return ok, why
	})
}

// kubeletSynced asks the kubelet, through the API server's node proxy
// (the way exec and logs reach it), for its health and its pods.
func (n *Node) kubeletSynced() (bool, string) {
	out, err := n.c.Kubectl("get", "--raw", "/api/v1/nodes/"+n.Name+"/proxy/healthz")
	if err != nil || strings.TrimSpace(out) != "ok" {
		return false, fmt.Sprintf("healthz: %s %v", out, err)
	}
	want, err := n.c.Kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName="+n.Name, "-o", "jsonpath={range .items[*]}{.metadata.uid}{\" \"}{end}")
	if err != nil {
		return false, want
	}
	has, err := n.c.Kubectl("get", "--raw", "/api/v1/nodes/"+n.Name+"/proxy/pods")
	if err != nil {
		return false, fmt.Sprintf("kubelet /pods: %s %v", has, err)
	}
	for _, uid := range strings.Fields(want) {
		if !strings.Contains(has, uid) {
			return false, "the kubelet does not know pod " + uid + " yet"
		}
	}
	return true, ""
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
