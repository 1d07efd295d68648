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
)

// Node is a worker: a network namespace on the underlay with its own
// containerd and kubelet (and kube-proxy with Options.KubeProxy).
type Node struct {
	c *Cluster
	// Name is the node's name in Kubernetes.
	Name string
	// NS is its network namespace (/var/run/netns/NS).
	NS string
	// IP is its underlay address, the Node's InternalIP.
	IP string
	// Dir holds its containerd, kubelet and CNI directories.
	Dir string

	containerd, kubelet, proxy *proc
}

// CNIBinDir and CNIConfDir are where the node's runtime looks for CNI
// plugins and configurations.
func (n *Node) CNIBinDir() string  { return filepath.Join(n.Dir, "cni", "bin") }
func (n *Node) CNIConfDir() string { return filepath.Join(n.Dir, "cni", "net.d") }

// ContainerdSocket is the node's containerd socket.
func (n *Node) ContainerdSocket() string { return filepath.Join(n.Dir, "containerd.sock") }

// KubeletDir is the kubelet's --root-dir (device plugins, pod resources).
func (n *Node) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// CgroupRoot is the cgroup the node's pods live under.
func (n *Node) CgroupRoot() string { return "/skiff-test-" + n.Name + "-" + filepath.Base(n.c.Dir) }

// Run runs a command in the node's namespace and returns its combined
// output.
func (n *Node) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/var/run/netns/" + n.NS, "--"}, args...)...).CombinedOutput()
	return string(out), err
}

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

// start starts the node's containerd, imports the images, runs
// BeforeKubelet, and starts its kubelet (and kube-proxy).
func (n *Node) start() error {
	c := n.c
	for _, d := range []string{n.CNIBinDir(), n.CNIConfDir(), n.KubeletDir(), filepath.Join(n.Dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd.toml"), []byte(n.expand(containerdConfig)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "kubelet.yaml"), []byte(n.expand(kubeletConfig)), 0o644); err != nil {
		return err
	}
	if err := c.pki.kubeconfig(filepath.Join(n.Dir, "kubelet.kubeconfig"), c.Server, "node-"+n.Name); err != nil {
		return err
	}
	if err := makeCgroup(n.CgroupRoot()); err != nil {
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
		return n.startProxy()
	}
	return nil
}

// StartContainerd starts the node's containerd and waits for its socket.
func (n *Node) StartContainerd() error {
	p, err := start(n.Dir, n.NS, "containerd", nil, "containerd", "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.containerd = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, err := n.ctr("version"); err == nil && strings.Contains(out, "Server:") {
			return nil
		}
		if p.exited() || time.Now().After(deadline) {
			return fmt.Errorf("cluster: containerd of %s not up: %v\n%s", n.Name, p.err, p.tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopContainerd stops the node's containerd; running containers stay
// (their shims hold them).
func (n *Node) StopContainerd() { n.containerd.stop(10 * time.Second) }

func (n *Node) ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", n.ContainerdSocket(), "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// ImportImage imports a docker-archive tarball into the node's
// containerd, for pods with imagePullPolicy Never.
func (n *Node) ImportImage(file string) error {
	if out, err := n.ctr("images", "import", file); err != nil {
		return fmt.Errorf("cluster: importing %s on %s: %v\n%s", file, n.Name, err, out)
	}
	return nil
}

// StartKubelet starts the node's kubelet.
func (n *Node) StartKubelet() error {
	p, err := start(n.Dir, n.NS, "kubelet", nil, filepath.Join(n.c.bin, "kubelet"),
		"--config", filepath.Join(n.Dir, "kubelet.yaml"), "--kubeconfig", filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--root-dir", n.KubeletDir(), "--hostname-override", n.Name, "--node-ip", n.IP, "--v=1")
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// StopKubelet stops the node's kubelet (SIGTERM); its pods keep running.
func (n *Node) StopKubelet() { n.kubelet.stop(15 * time.Second) }

// KillKubelet kills the node's kubelet (SIGKILL).
func (n *Node) KillKubelet() { n.kubelet.kill() }

// KubeletLog is the node's kubelet log so far.
func (n *Node) KubeletLog() string { return n.kubelet.tail(1 << 20) }

func (n *Node) startProxy() error {
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
		return err
	}
	p, err := start(n.Dir, n.NS, "kube-proxy", nil, filepath.Join(n.c.bin, "kube-proxy"), "--config", file, "--v=1")
	if err != nil {
		return err
	}
	n.proxy = p
	return nil
}

// Logs returns a pod's container logs (kubectl logs).
func (c *Cluster) Logs(t testing.TB, namespace, pod string, args ...string) string {
	t.Helper()
	out, _ := c.Kubectl(append([]string{"-n", namespace, "logs", pod}, args...)...)
	return out
}

// WaitKubelet waits until the node's kubelet answers its health check
// and knows every pod the API server has bound to the node: a restarted
// kubelet serves exec and logs for them from then on.
func (n *Node) WaitKubelet(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := n.kubeletSynced()
		if ok {
			return
		}
		if n.kubelet.exited() {
			t.Fatalf("kubelet of %s exited: %v\n%s", n.Name, n.kubelet.err, n.kubelet.tail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet of %s not back after %v: %s", n.Name, within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *Node) kubeletSynced() (bool, string) {
	out, err := n.Run("curl", "-s", "-m", "1", "http://127.0.0.1:10248/healthz")
	if err != nil || strings.TrimSpace(out) != "ok" {
		return false, fmt.Sprintf("healthz: %s %v", out, err)
	}
	want, err := n.c.Kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName="+n.Name, "-o", "jsonpath={range .items[*]}{.metadata.uid}{\" \"}{end}")
	if err != nil {
		return false, want
	}
	p := n.c.pki
	has, err := n.Run("curl", "-s", "-m", "2", "--cacert", p.path("ca"), "-k", "--cert", p.path("kubelet-client"), "--key", p.keyPath("kubelet-client"),
		"https://"+n.IP+":10250/pods")
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
