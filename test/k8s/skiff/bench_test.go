package skiff

import (
	"context"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// burst creates n pods on node at once (one kubectl apply) and returns,
// for each, the time from the apply's start to the pod's first Ready
// event, and the time until all were Ready.
func burst(b *testing.B, c *cluster.Cluster, node string, n int) (each []time.Duration, all time.Duration) {
	b.Helper()
	cs := c.Client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A retry watcher: the API server may end a watch at any time, and a
	// closed watch channel must not read as "no pod Ready yet".
	sel := metav1.ListOptions{LabelSelector: "bench=burst"}
	list, err := cs.CoreV1().Pods("default").List(ctx, sel)
	if err != nil {
		b.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.LabelSelector
			return cs.CoreV1().Pods("default").Watch(ctx, o)
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var docs strings.Builder
	for i := range n {
		fmt.Fprintf(&docs, `apiVersion: v1
kind: Pod
metadata: {name: burst-%d, labels: {bench: burst}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: skiff.local/testpod:dev, imagePullPolicy: Never, command: ["/bin/sh", "-c", "exec sleep 3600"]}
---
`, i, node)
	}
	start := time.Now()
	c.Apply(b, docs.String())
	ready := map[string]time.Duration{}
	for len(ready) < n {
		select {
		case <-ctx.Done():
			b.Fatalf("%d of %d pods Ready after 5 minutes", len(ready), n)
		case ev, open := <-w.ResultChan():
			if !open {
				b.Fatalf("the pods' watch ended with %d of %d Ready", len(ready), n)
			}
			if ev.Type == watch.Error {
				b.Fatalf("the pods' watch: %v", ev.Object)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					if _, seen := ready[p.Name]; !seen {
						ready[p.Name] = time.Since(start)
					}
				}
			}
		}
	}
	for _, d := range ready {
		each = append(each, d)
	}
	slices.Sort(each)
	all = each[len(each)-1]
	c.MustKubectl(b, "delete", "pods", "-l", "bench=burst", "--wait=true", "--timeout=3m")
	return each, all
}

func pct(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkPodBurst: 30 pods created at once on one node through the real
// kubelet and containerd, create to Ready (p50, p99, last), with Skiff
// installed by kubectl and, in the same run, with the CNI project's
// bridge + host-local as the cluster network. Run (root):
//
//	go test -run '^$' -bench PodBurst -benchtime 1x -timeout 30m ./test/k8s/skiff/
func BenchmarkPodBurst(b *testing.B) {
	for b.Loop() {
		const n = 30
		c, imgs := skiffCluster(b)
		burst(b, c, "k1", 3) // warm: the image's first use on the node
		skiff, skiffAll := burst(b, c, "k1", n)
		c.Stop()

		r := bridgeCluster(b, imgs[:2])
		r.WaitNodes(b, time.Minute, true)
		r.WaitDefaultServiceAccount(b, "default")
		burst(b, r, "k1", 3)
		ref, refAll := burst(b, r, "k1", n)
		r.Stop()

		b.ReportMetric(ms(pct(skiff, .5)), "skiff-p50-ms")
		b.ReportMetric(ms(pct(skiff, .99)), "skiff-p99-ms")
		b.ReportMetric(ms(skiffAll), "skiff-all-ms")
		b.ReportMetric(ms(pct(ref, .5)), "bridge-p50-ms")
		b.ReportMetric(ms(pct(ref, .99)), "bridge-p99-ms")
		b.ReportMetric(ms(refAll), "bridge-all-ms")
		b.ReportMetric(float64(pct(skiff, .5))/float64(pct(ref, .5)), "p50-ratio")
	}
}

// skiffCluster starts a two-node cluster (kube-proxy in iptables mode)
// with Skiff installed by kubectl, every node Ready; it also returns the
// images it was given, for a reference cluster in the same run.
func skiffCluster(b *testing.B) (*cluster.Cluster, []string) {
	b.Helper()
	root := Root(b)
	imgs := Images(b, root, b.TempDir())
	c := cluster.Start(b, cluster.Options{Nodes: 2, KubeProxy: true, Images: imgs})
	c.MustKubectl(b, "apply", "-k", WriteOverlay(b, root, c, Overlay{}))
	WaitRollout(b, c, 3*time.Minute)
	c.WaitNodes(b, time.Minute, true)
	c.WaitDefaultServiceAccount(b, "default")
	return c, imgs
}

// bridgeCluster starts a two-node cluster (kube-proxy in iptables mode)
// whose network is the CNI project's bridge + host-local, built from the
// module: each node a subnet of its own (k1 203.0.113.0/25, k2
// 203.0.113.128/25) on a bridge that is its pods' default gateway, and a route on each
// node to the other's subnet through its underlay address, as an
// operator of a routed bridge network would set up.
func bridgeCluster(b *testing.B, imgs []string) *cluster.Cluster {
	b.Helper()
	plugins := b.TempDir()
	build := exec.Command("go", "build", "-o", plugins+"/", "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the reference plugins: %v\n%s", err, out)
	}
	subnet := func(n *cluster.Node) string {
		if n.Name == "k1" {
			return "203.0.113.0/25"
		}
		return "203.0.113.128/25"
	}
	r := cluster.Start(b, cluster.Options{Nodes: 2, KubeProxy: true, Images: imgs,
		BeforeKubelet: func(n *cluster.Node) error {
			for _, p := range []string{"bridge", "host-local"} {
				data, err := os.ReadFile(filepath.Join(plugins, p))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(n.CNIBinDir(), p), data, 0o755); err != nil {
					return err
				}
			}
			conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ref","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"isDefaultGateway":true,
				"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, subnet(n), filepath.Join(n.Dir, "host-local"))
			return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-ref.conflist"), []byte(conf), 0o644)
		}})
	// kube-proxy needs the bridge's traffic to pass iptables (Kubernetes'
	// network plugin requirements; kubeadm checks it): two pods on one
	// bridge talk through a Service only so.
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			b.Fatalf("modprobe br_netfilter: %v\n%s", err, out)
		}
	}
	for _, n := range r.Nodes {
		if out, err := n.Run("sysctl", "-w", "net.bridge.bridge-nf-call-iptables=1"); err != nil {
			b.Fatalf("%s: %v\n%s", n.Name, err, out)
		}
		for _, o := range r.Nodes {
			if o != n {
				if out, err := n.Run("ip", "route", "add", subnet(o), "via", o.IP); err != nil {
					b.Fatalf("%s: route to %s's pods: %v\n%s", n.Name, o.Name, err, out)
				}
			}
		}
	}
	return r
}

// BenchmarkClusterIPRate: sequential TCP connections from a pod through a
// ClusterIP Service backed by a pod on each node, kube-proxy in iptables
// mode, with Skiff installed by kubectl and, in the same run, with the CNI
// project's bridge plugin as the cluster network (bridgeCluster). Every
// connection must be answered. Run (root):
//
//	go test -run '^$' -bench ClusterIPRate -benchtime 1x -timeout 30m ./test/k8s/skiff/
func BenchmarkClusterIPRate(b *testing.B) {
	for b.Loop() {
		c, imgs := skiffCluster(b)
		skiff := clusterIPRate(b, c)
		b.Logf("skiff: %.0f connections/s", skiff)
		c.Stop()

		r := bridgeCluster(b, imgs[:2])
		r.WaitNodes(b, time.Minute, true)
		r.WaitDefaultServiceAccount(b, "default")
		ref := clusterIPRate(b, r)
		r.Stop()

		b.ReportMetric(skiff, "skiff-conn/s")
		b.ReportMetric(ref, "bridge-conn/s")
		b.ReportMetric(skiff/ref, "ratio")
	}
}

// clusterIPRate makes two probe pods (one per node) behind a ClusterIP
// Service and a client pod on k1, waits until the client is answered by
// both backends, and returns the rate of 500 sequential connections made
// in one exec (its own cost included), failing unless all are answered.
func clusterIPRate(b *testing.B, c *cluster.Cluster) float64 {
	b.Helper()
	c.Apply(b, namedPod("s1", "k1", map[string]string{"app": "svc"})+namedPod("s2", "k2", map[string]string{"app": "svc"})+
		namedPod("client", "k1", map[string]string{"name": "client"})+service("both", "app: svc", 0))
	c.MustKubectl(b, "wait", "--for=condition=Ready", "pod/s1", "pod/s2", "pod/client", "--timeout=120s")
	ip := strings.TrimSpace(c.MustKubectl(b, "get", "service", "both", "-o", "jsonpath={.spec.clusterIP}"))
	seen := map[string]bool{}
	for deadline := time.Now().Add(time.Minute); !seen["s1"] || !seen["s2"]; {
		if time.Now().After(deadline) {
			b.Fatalf("client through Service both at %s was answered by %v within a minute, want s1 and s2", ip, seen)
		}
		seen[answer(c, "client", ip, "80")] = true
	}
	const n = 500
	start := time.Now()
	out, err := execIn(c, "client", "sh", "-c", fmt.Sprintf(`ok=0; i=0; while [ $i -lt %d ]; do [ -n "$(nc -w 1 %s 80)" ] && ok=$((ok+1)); i=$((i+1)); done; echo $ok`, n, ip))
	took := time.Since(start)
	if err != nil || strings.TrimSpace(out) != fmt.Sprint(n) {
		b.Fatalf("%d connections through Service both: %q answered, %v", n, strings.TrimSpace(out), err)
	}
	return n / took.Seconds()
}
