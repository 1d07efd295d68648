// Command demo-k8s shows Skiff as a Kubernetes operator meets it, on one
// machine (root needed): a real two-node cluster (etcd, kube-apiserver,
// controller-manager, scheduler; per node containerd, kubelet and
// kube-proxy, each node a network namespace: test/k8s/cluster), Skiff
// installed with kubectl apply -k from its image (test/k8s/skiff), pods
// on both nodes reaching each other over Skiff's overlay, a NetworkPolicy
// applied with kubectl and probed (allowed and denied), and a teardown
// that leaves nothing behind, also on Ctrl-C. Run it with make demo-k8s
// (make build first: the image is made from bin/).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/k8s/skiff"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := newTB(ctx)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		demo(t)
	}()
	interrupted := false
	select {
	case <-done:
	case s := <-sig:
		// kubectl, in the terminal's process group, got the signal too:
		// the step under way ends, or the next step will not start.
		fmt.Printf("\n== %v: tearing everything down\n", s)
		interrupted = true
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	t.cleanup()
	if interrupted {
		fmt.Printf("\ndemo-k8s: interrupted after %v; everything it made is gone\n", time.Since(start).Round(time.Second))
		os.Exit(130)
	}
	if t.Failed() {
		fmt.Printf("\ndemo-k8s: FAILED after %v (everything it made is gone)\n", time.Since(start).Round(time.Second))
		os.Exit(1)
	}
	fmt.Printf("\ndemo-k8s: done in %v; the cluster and everything it made are gone\n", time.Since(start).Round(time.Second))
}

// step announces a step; it ends the demo's goroutine once interrupted.
func step(t *tb, format string, args ...any) {
	if t.ctx.Err() != nil {
		runtime.Goexit()
	}
	fmt.Printf("\n== "+format+"\n", args...)
}

// show runs kubectl and prints the command and its output.
func show(t *tb, c *cluster.Cluster, args ...string) string {
	fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
	out := c.MustKubectl(t, args...)
	t.print("  ", out)
	return out
}

// apply writes YAML into the cluster's directory and shows kubectl
// apply -f of it.
func apply(t *tb, c *cluster.Cluster, name, yaml string) {
	f := filepath.Join(c.Dir, name)
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	show(t, c, "apply", "-f", f)
}

// showSkiffctl runs skiffctl in the controller's pod and prints it.
func showSkiffctl(t *tb, c *cluster.Cluster, args ...string) {
	fmt.Printf("$ kubectl -n skiff-system exec skiff-controller-0 -- skiffctl %s\n", strings.Join(args, " "))
	t.print("  ", skiff.Skiffctl(t, c, args...))
}

// probe runs a TCP probe (nc to port 8080, the pods answer "ok") from a
// pod and prints it; want is the expected result.
func probe(t *tb, c *cluster.Cluster, from, to, ip string, want bool) {
	got := skiff.Connects(c, from, ip)
	verdict := map[bool]string{true: "allowed", false: "denied"}
	mark := "as expected"
	if got != want {
		mark = "UNEXPECTED"
		t.Fail()
	}
	fmt.Printf("   probe %s -> %s (%s:8080/tcp): %s (%s)\n", from, to, ip, verdict[got], mark)
}

func demo(t *tb) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the cluster's nodes are network namespaces")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("run from the repository's root (make demo-k8s): %v", err)
	}

	step(t, "Images: pause, the test pod (busybox + probe) and Skiff's (the four binaries of bin/), as docker archives: no registry")
	imgs := skiff.Images(t, root, t.TempDir())
	for _, i := range imgs {
		fmt.Println("   " + i)
	}

	step(t, "A Kubernetes cluster on this machine: etcd, kube-apiserver, controller-manager, scheduler; nodes k1 and k2 (network namespaces on an underlay bridge), each with containerd, kubelet and kube-proxy")
	began := time.Now()
	c := cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: imgs})
	t.Cleanup(func() {
		fmt.Println("\n== Teardown: every process, container, mount, cgroup and namespace of the cluster")
		if t.Failed() {
			skiff.Diagnose(t, c)
		}
	})
	fmt.Printf("   up in %v; no pod network yet, so the nodes are NotReady\n", time.Since(began).Round(100*time.Millisecond))
	show(t, c, "get", "nodes", "-o", "wide")

	step(t, "Install Skiff with kubectl apply -k (deploy/kubernetes/overlays/software, under a test overlay: images never pulled, the nodes' files under the cluster's directory)")
	overlay := skiff.WriteOverlay(t, root, c, skiff.Overlay{})
	began = time.Now()
	show(t, c, "apply", "-k", overlay)
	skiff.WaitRollout(t, c, 3*time.Minute)
	c.WaitNodes(t, time.Minute, true)
	fmt.Printf("   controller and agents ready, nodes Ready, %v after kubectl apply\n", time.Since(began).Round(100*time.Millisecond))
	show(t, c, "-n", "skiff-system", "get", "pods", "-o", "wide")
	show(t, c, "get", "nodes")
	c.WaitDefaultServiceAccount(t, "default")

	step(t, "Pods on both nodes: client (app=client) and other (app=other) on k1, server (app=server) on k2")
	apply(t, c, "pods.yaml", skiff.ProbePod("client", "k1", map[string]string{"app": "client"})+
		skiff.ProbePod("other", "k1", map[string]string{"app": "other"})+
		skiff.ProbePod("server", "k2", map[string]string{"app": "server"}))
	began = time.Now()
	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/client", "pod/other", "pod/server", "--timeout=120s")
	fmt.Printf("   Ready in %v\n", time.Since(began).Round(100*time.Millisecond))
	show(t, c, "get", "pods", "-o", "wide")
	showSkiffctl(t, c, "get", "endpoints")
	client, other, server := skiff.PodIP(t, c, "client"), skiff.PodIP(t, c, "other"), skiff.PodIP(t, c, "server")

	step(t, "Across the nodes over Skiff's VXLAN overlay: ping and TCP")
	fmt.Printf("$ kubectl exec client -- ping -c 3 %s\n", server)
	out, err := skiff.ExecIn(c, "client", "ping", "-c", "3", "-W", "2", server)
	t.print("  ", out)
	if err != nil {
		t.Errorf("client cannot ping server: %v", err)
	}
	probe(t, c, "client", "server", server, true)
	probe(t, c, "other", "server", server, true)
	probe(t, c, "server", "client", client, true)

	step(t, "A NetworkPolicy with kubectl: server admits TCP 8080 from app=client only")
	policy := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-ingress, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {app: client}}
    ports: [{protocol: TCP, port: 8080}]
`
	t.print("   ", policy)
	began = time.Now()
	apply(t, c, "policy.yaml", policy)
	// Enforced once other's probe is refused (the adapter, the
	// controller and server's agent have done their part).
	for skiff.Connects(c, "other", server) {
		if time.Since(began) > 30*time.Second {
			t.Fatal("other still reaches server 30 s after the policy was applied")
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("   enforced within %v of kubectl apply (measured through kubectl exec probes)\n", time.Since(began).Round(100*time.Millisecond))
	showSkiffctl(t, c, "get", "policies")
	probe(t, c, "client", "server", server, true)
	probe(t, c, "other", "server", server, false)
	pinged := skiff.Pings(c, "client", server)
	fmt.Printf("   ping client -> server: %s (%s)\n", map[bool]string{true: "allowed", false: "denied"}[pinged],
		map[bool]string{true: "UNEXPECTED: the policy admits TCP 8080 only", false: "as expected: the policy admits TCP 8080 only"}[pinged])
	if pinged {
		t.Fail()
	}
	probe(t, c, "server", "other", other, true)

	step(t, "kubectl delete networkpolicy: other reaches server again")
	show(t, c, "delete", "networkpolicy", "server-ingress")
	began = time.Now()
	for !skiff.Connects(c, "other", server) {
		if time.Since(began) > 30*time.Second {
			t.Fatal("other does not reach server 30 s after the policy was deleted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	probe(t, c, "other", "server", server, true)
}
