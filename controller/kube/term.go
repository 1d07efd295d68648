package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// term is one leadership term of the adapter: one shared informer factory
// (one watch per resource for the whole cluster), a work queue per kind
// whose workers make Skiff match the API, and the Skiff node watch.
type term struct {
	*Adapter
	factory  informers.SharedInformerFactory
	pods     corelisters.PodLister
	nss      corelisters.NamespaceLister
	nodes    corelisters.NodeLister
	policies netlisters.NetworkPolicyLister
	recorder record.EventRecorder

	podQ, gcQ, nsQ, policyQ, nodeQ workqueue.TypedRateLimitingInterface[string]

	mu          sync.Mutex
	skiffNodes  map[string]skiffNode // by name, from the controller's node watch
	goneNodes   map[string]bool      // Nodes deleted from the API, to be cleaned up
	mismatched  map[string]bool      // Nodes whose InternalIP is not their underlay
	gcDeadlines map[string]time.Time // pods without an owner record: when to free their endpoints
	refusedKeys map[string]bool      // NetworkPolicies whose current version Skiff refused
}

func newAdapter(a *Adapter) *term {
	q := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	return &term{Adapter: a, podQ: q("pods"), gcQ: q("pod-gc"), nsQ: q("namespaces"), policyQ: q("networkpolicies"), nodeQ: q("nodes"),
		skiffNodes: map[string]skiffNode{}, goneNodes: map[string]bool{}, mismatched: map[string]bool{}, gcDeadlines: map[string]time.Time{}}
}

// handlers enqueues the keys of changed objects; changed says whether an
// update matters (what the transform kept differs).
func handlers(q workqueue.TypedRateLimitingInterface[string], changed func(old, new any) bool, deleted func(key string)) cache.ResourceEventHandlerFuncs {
	add := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: add,
		UpdateFunc: func(old, new any) {
			if changed(old, new) {
				add(new)
			}
		},
		DeleteFunc: func(obj any) {
			k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				return
			}
			if deleted != nil {
				deleted(k)
			}
			q.Add(k)
		},
	}
}

func (t *term) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.factory = informers.NewSharedInformerFactoryWithOptions(t.client, 0, informers.WithTransform(transform))
	podInf := t.factory.Core().V1().Pods()
	nsInf := t.factory.Core().V1().Namespaces()
	nodeInf := t.factory.Core().V1().Nodes()
	polInf := t.factory.Networking().V1().NetworkPolicies()
	t.pods, t.nss, t.nodes, t.policies = podInf.Lister(), nsInf.Lister(), nodeInf.Lister(), polInf.Lister()
	var regs []func() error
	reg := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		r, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		regs = append(regs, func() error { return inf.RemoveEventHandler(r) })
		return nil
	}
	for _, x := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{podInf.Informer(), handlers(t.podQ, podChanged, nil)},
		{nsInf.Informer(), handlers(t.nsQ, labelsChanged, nil)},
		{nodeInf.Informer(), handlers(t.nodeQ, nodeChanged, t.nodeDeleted)},
		{polInf.Informer(), handlers(t.policyQ, policyChanged, nil)},
	} {
		if err := reg(x.inf, x.h); err != nil {
			return fmt.Errorf("kube: event handler: %w", err)
		}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: t.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	t.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "skiff-controller"})

	t.factory.StartWithContext(ctx)
	queues := []workqueue.TypedRateLimitingInterface[string]{t.podQ, t.gcQ, t.nsQ, t.policyQ, t.nodeQ}
	defer func() {
		cancel() // the informers stop, then Shutdown waits for them
		t.factory.Shutdown()
		for _, q := range queues {
			q.ShutDown()
		}
	}()
	start := time.Now()
	if err := t.factory.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		return fmt.Errorf("kube: informers: %w", err)
	}
	t.log.Info("informers synced", "took", time.Since(start), "pods", len(podInf.Informer().GetStore().ListKeys()),
		"namespaces", len(nsInf.Informer().GetStore().ListKeys()), "nodes", len(nodeInf.Informer().GetStore().ListKeys()),
		"networkPolicies", len(polInf.Informer().GetStore().ListKeys()))
	if err := t.loadSkiffNodes(ctx); err != nil {
		return err
	}
	if err := t.resync(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, q := range queues {
			q.ShutDown() // workers return from Get
		}
		wg.Wait()
	}()
	wg.Go(func() { t.watchSkiffNodes(ctx) })
	for _, w := range []struct {
		name string
		q    workqueue.TypedRateLimitingInterface[string]
		fn   func(context.Context, string) error
		n    int
	}{{"pods", t.podQ, t.syncPod, 2}, {"pod-gc", t.gcQ, t.collectPod, 1}, {"namespaces", t.nsQ, t.syncNamespace, 1},
		{"networkpolicies", t.policyQ, t.syncPolicy, 1}, {"nodes", t.nodeQ, t.syncNode, 1}} {
		for range w.n {
			wg.Go(func() { t.work(ctx, w.name, w.q, w.fn) })
		}
	}
	t.log.Info("kubernetes adapter running", "gcGrace", t.cfg.GCGrace)
	<-ctx.Done()
	for _, r := range regs {
		_ = r()
	}
	return ctx.Err()
}

// work runs fn on the queue's keys until the queue shuts down; a failed
// key is retried with backoff.
func (t *term) work(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], fn func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := fn(cctx, key)
		cancel()
		switch {
		case err == nil:
			q.Forget(key)
		case ctx.Err() != nil:
		default:
			t.m.errors.WithLabelValues(name).Inc()
			t.log.Warn("sync failed; retrying", "queue", name, "key", key, "err", err)
			q.AddRateLimited(key)
		}
		q.Done(key)
	}
}
