package cluster

import (
	"slices"
	"time"
)

// Stop stops the cluster and removes everything it made: every process
// (the control plane, the nodes' containerd, shims, kubelets, kube-proxies
// and pods' containers, found by cgroup), every mount under its directory,
// its cgroups, network namespaces (with the links and iptables rules in
// them) and directory; the last cluster running on the machine puts back
// the global sysctls the kubelets changed. Start arranges for it to run
// when the test ends; calling it earlier is fine. Idempotent.
func (c *Cluster) Stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	if c.t.Failed() {
		for _, p := range c.allProcs() {
			c.t.Logf("---- %s (%s)\n%s", p.name, p.log, p.tail(25))
		}
	}
	// The kubelets first: they would restart what is killed under them.
	for _, n := range c.Nodes {
		n.proxy.kill()
		n.kubelet.kill()
	}
	stale, err := unregister(c.rec)
	for _, p := range c.allProcs() {
		if !p.wait(10 * time.Second) {
			c.t.Errorf("cluster: %s (pid %d) still running after its cgroup was emptied", p.name, p.pid())
		}
	}
	if err != nil {
		c.t.Errorf("cluster: stopping: %v", err)
	}
	if stale != nil {
		c.t.Logf("cluster: left behind by earlier test processes, not cleaned up: %v", stale)
	}
}

func (c *Cluster) allProcs() []*proc {
	out := slices.Clone(c.procs)
	for _, n := range c.Nodes {
		out = append(out, n.holder, n.containerd, n.kubelet, n.proxy)
	}
	return slices.DeleteFunc(out, func(p *proc) bool { return p == nil })
}
