package kubemem

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/skiff-sdn/skiff/controller/kube"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// The shape of the simulated cluster: pods spread over fakeNodes Node
// objects (no kubelet behind them) and one namespace per podsPerNS pods.
const (
	fakeNodes  = 100
	podsPerNS  = 100
	createJobs = 32
)

// bench is the state shared by the sub-benchmarks: one cluster, one
// controller, one adapter, and the pods made so far.
type bench struct {
	c      *cluster.Cluster
	ctl    *controllerProc
	client kubernetes.Interface
	pods   int
	base   heaps
}

// BenchmarkAdapterMemory measures what the Kubernetes adapter holds per
// pod: a control-plane-only cluster (kube-apiserver and etcd, no
// kubelets), the real skiff-controller binary (embedded etcd) and the
// adapter in this process as a client of the controller's
// ManagementService, as skiff-controller --kubeconfig runs it (there over
// an in-process connection). Pods are created in the API server, bound to
// fake Node objects by spec.nodeName, with one namespace per 100 pods;
// once the controller holds an owner record for every pod (the adapter
// synced them), the live heap after a GC is compared with the one at 0
// pods. B/pod is this process's (the adapter's informers, queues and
// client), ctl-B/pod the controller process's (its owner records),
// ctl-rss-B/pod the controller's resident set.
//
//	go test -run '^$' -bench AdapterMemory -benchtime 1x -timeout 30m ./test/k8s/kubemem
func BenchmarkAdapterMemory(b *testing.B) {
	bn := setup(b)
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			if n < bn.pods {
				b.Skipf("%d pods exist already (run the sizes in increasing order)", bn.pods)
			}
			start := time.Now()
			bn.grow(b, n)
			created := time.Since(start)
			bn.waitSynced(b, n)
			synced := time.Since(start)
			h := measure(b, bn.ctl)
			b.ReportMetric(float64(int64(h.adapter)-int64(bn.base.adapter))/float64(n), "B/pod")
			b.ReportMetric(float64(int64(h.ctl)-int64(bn.base.ctl))/float64(n), "ctl-B/pod")
			b.ReportMetric(float64(int64(h.ctlRSS)-int64(bn.base.ctlRSS))/float64(n), "ctl-rss-B/pod")
			b.ReportMetric(float64(h.adapter), "heap-B")
			b.ReportMetric(created.Seconds(), "create-s")
			b.ReportMetric(synced.Seconds(), "synced-s")
			b.Logf("%d pods: adapter heap %d B (0 pods: %d B), controller heap %d B (0 pods: %d B), controller RSS %d B (0 pods: %d B); created in %v, synced in %v",
				n, h.adapter, bn.base.adapter, h.ctl, bn.base.ctl, h.ctlRSS, bn.base.ctlRSS, created.Round(time.Millisecond), synced.Round(time.Millisecond))
		})
	}
}

// setup starts the cluster, the controller and the adapter, makes the
// fake Nodes, waits for the adapter to sync them and takes the 0-pod
// heaps.
func setup(b *testing.B) *bench {
	b.Helper()
	// No kubelet ever reports: the node lifecycle controller would taint
	// the fake Nodes and evict their pods, the pod GC collect them.
	c := cluster.Start(b, cluster.Options{ControlPlaneOnly: true,
		ControllerManagerArgs: []string{"--controllers=*,-nodelifecycle,-podgc"}})
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	bn := &bench{c: c, client: client}
	ctx := b.Context()
	for i := range fakeNodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fake-%03d", i),
			Labels: map[string]string{"kubernetes.io/hostname": fmt.Sprintf("fake-%03d", i), "kubernetes.io/os": "linux"}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			b.Fatalf("create node: %v", err)
		}
	}
	bn.ctl = startController(b, c)
	actx, cancel := context.WithCancel(context.Background())
	ad, err := kube.New(kube.Config{GCGrace: time.Hour}, c.RESTConfig(), bn.ctl.mgmt, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ad.Run(actx); err != nil {
			b.Errorf("adapter: %v", err)
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
	// Synced at 0 pods: every fake Node has its NetworkUnavailable
	// condition (no agent is connected).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nl, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		marked := 0
		for _, n := range nl.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeNetworkUnavailable && cond.Status == corev1.ConditionTrue {
					marked++
				}
			}
		}
		if marked == fakeNodes {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the adapter marked %d of %d Nodes NetworkUnavailable", marked, fakeNodes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bn.waitSynced(b, 0)
	bn.base = measure(b, bn.ctl)
	b.Logf("0 pods: adapter heap %d B, controller heap %d B, controller RSS %d B", bn.base.adapter, bn.base.ctl, bn.base.ctlRSS)
	return bn
}

// grow creates pods (and their namespaces) until there are n.
func (bn *bench) grow(b *testing.B, n int) {
	b.Helper()
	ctx := b.Context()
	for ns := (bn.pods + podsPerNS - 1) / podsPerNS; ns*podsPerNS < n; ns++ {
		o := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(ns),
			Labels: map[string]string{"team": fmt.Sprintf("team-%d", ns%7), "env": "bench"}}}
		if _, err := bn.client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("create namespace: %v", err)
		}
	}
	// The ServiceAccount admission refuses pods until the namespace's
	// default ServiceAccount exists.
	for ns := bn.pods / podsPerNS; ns*podsPerNS < n; ns++ {
		for {
			_, err := bn.client.CoreV1().ServiceAccounts(nsName(ns)).Get(ctx, "default", metav1.GetOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsNotFound(err) {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	jobs := make(chan int)
	errs := make(chan error, createJobs)
	var wg sync.WaitGroup
	for range createJobs {
		wg.Go(func() {
			for i := range jobs {
				if _, err := bn.client.CoreV1().Pods(nsName(i/podsPerNS)).Create(ctx, pod(i), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("create pod %d: %w", i, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := bn.pods; i < n; i++ {
		select {
		case jobs <- i:
		case err = <-errs:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	if err != nil {
		b.Fatal(err)
	}
	bn.pods = n
}

func nsName(i int) string { return fmt.Sprintf("mem-%03d", i) }

// pod is the i-th pod: what a Deployment's pod looks like in the API
// (labels, a container with resources, environment, probes), bound to a
// fake node. The adapter keeps only a sliver of it.
func pod(i int) *corev1.Pod {
	ns := i / podsPerNS
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%05d", i),
			Labels:      map[string]string{"app": fmt.Sprintf("web-%d", ns), "pod-template-hash": fmt.Sprintf("%08x", ns*2654435761), "tier": "frontend"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}},
		Spec: corev1.PodSpec{
			NodeName:                     fmt.Sprintf("fake-%03d", i%fakeNodes),
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "web", Image: "skiff.local/testpod:dev", Command: []string{"sleep", "infinity"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "serve"}, {Name: "LOG_LEVEL", Value: "info"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
			}},
		},
	}
}

// waitSynced waits until the controller holds an owner record for each
// of the n pods, with the pod's labels and node (the adapter has synced
// them), and one namespace record per namespace.
func (bn *bench) waitSynced(b *testing.B, n int) {
	b.Helper()
	ctx := b.Context()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		why := ""
		ol, err := bn.ctl.mgmt.ListOwners(ctx, &skiffv1.ListOwnersRequest{})
		if err != nil {
			b.Fatalf("list owners: %v", err)
		}
		owners := 0
		for _, o := range ol.GetOwners() {
			if !strings.HasPrefix(o.Name, "pod:mem-") {
				continue
			}
			owners++
			var i int
			if _, err := fmt.Sscanf(o.Name[strings.LastIndex(o.Name, "/")+1:], "web-%d", &i); err != nil {
				b.Fatalf("owner %s: %v", o.Name, err)
			}
			want := pod(i)
			if o.Node != want.Spec.NodeName || o.Labels["app"] != want.Labels["app"] || o.Namespace != nsName(i/podsPerNS) {
				b.Fatalf("owner %s: node %q, namespace %q, labels %v; want the pod's (%s, %s, %v)", o.Name, o.Node, o.Namespace, o.Labels,
					want.Spec.NodeName, nsName(i/podsPerNS), want.Labels)
			}
		}
		if owners != n {
			why = fmt.Sprintf("%d of %d pods have owner records", owners, n)
		}
		if why == "" {
			nl, err := bn.ctl.mgmt.ListNamespaces(ctx, &skiffv1.ListRequest{})
			if err != nil {
				b.Fatalf("list namespaces: %v", err)
			}
			got := 0
			for _, ns := range nl.GetNamespaces() {
				if strings.HasPrefix(ns.Name, "mem-") && ns.Labels["env"] == "bench" {
					got++
				}
			}
			if want := (n + podsPerNS - 1) / podsPerNS; got != want {
				why = fmt.Sprintf("%d of %d namespaces known", got, want)
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal(why)
		}
		time.Sleep(time.Second)
	}
}

// heaps are the live heaps (after a GC) of this process and of the
// controller, and the controller's resident set.
type heaps struct{ adapter, ctl, ctlRSS uint64 }

func measure(b *testing.B, ctl *controllerProc) heaps {
	b.Helper()
	// Twice: finalizers queued by the first collection free memory in
	// the second.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := heaps{adapter: ms.HeapAlloc}
	var err error
	if h.ctl, err = ctl.heapAlloc(b.Context()); err != nil {
		b.Fatal(err)
	}
	if h.ctlRSS, err = ctl.rss(); err != nil {
		b.Fatal(err)
	}
	return h
}
