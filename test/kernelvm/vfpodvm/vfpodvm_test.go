package vfpodvm

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/skiff-sdn/skiff/cni"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestVFPods runs every VF pod scenario on one rig (a rig takes long to
// start under emulation): a pod whose VF the kubelet allocated, with
// traffic to a pod on another node; refusals that leave nothing behind;
// a burst of 16 VF pods; VF ADD latency against a veth's; 100 ADD/DEL
// cycles.
func TestVFPods(t *testing.T) {
	r := newRig(t, []*api.PodResources{{Namespace: "default", Name: "vf-a", Containers: []*api.ContainerResources{
		{Name: "app", Devices: []*api.ContainerDevices{{ResourceName: "skiff.io/vf", DeviceIds: []string{r0PCI}}}}}}})
	if r.refs[0].PCI != r0PCI || len(r.refs) != 16 {
		t.Fatalf("VFs %+v: want 16, the first %s", r.refs, r0PCI)
	}
	t.Run("traffic", r.traffic)
	t.Run("refused", r.refused)
	t.Run("burst", r.burst)
	t.Run("latency", r.latency)
	t.Run("cycles", r.cycles)
}

const r0PCI = "0000:7f:00.0"

// traffic: the kubelet allocated VF 0 to pod vf-a; skiff-cni asks the
// pod resources API, the VF is moved in, renamed, addressed, set through
// its PF, and the pod pings a pod on n2 through the representor's rules.
// DEL gives it back; a VF whose pod namespace died is given back by the
// next reconcile, before its DEL.
func (r *rig) traffic(t *testing.T) {
	guest.AddNetns(t, "skvfpb")
	b := pod{id: "ctr-b", netns: guest.HoldNetns(t, "skvfpb"), ifName: "eth0", sock: r.sock2}
	resB, _ := r.add(b)
	ipB := strings.Split(resB.IPs[0].Address, "/")[0]

	a := pod{id: "ctr-a", netns: podNS(t, "skvfpa"), ifName: "eth0", sock: r.sock1, args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=vf-a;K8S_POD_UID=u1"}
	epA := cni.EndpointName(a.id, a.ifName)
	r.wire(t, 0, 120, datapath.HostIfName(epA))
	resA, took := r.add(a)
	t.Logf("VF pod ADD (kubelet's pod resources asked) took %v", took)
	ipA := strings.Split(resA.IPs[0].Address, "/")[0]
	if len(resA.Interfaces) != 2 || resA.Interfaces[0].Name != r.pfs[0].Reps[0] {
		t.Errorf("result interfaces %+v: want the host side to be VF 0's representor %s", resA.Interfaces, r.pfs[0].Reps[0])
	}
	eth0, ok := links(t, "skvfpa")["eth0"]
	switch {
	case !ok:
		t.Fatalf("pod has no eth0: %v", links(t, "skvfpa"))
	case !strings.Contains(eth0.Alias, "pci="+r0PCI+" home="+r.homes[0]):
		t.Errorf("pod's eth0 has alias %q: not VF %s (home %s)", eth0.Alias, r0PCI, r.homes[0])
	case eth0.Address != resA.Interfaces[1].Mac || eth0.MTU != resA.Interfaces[1].Mtu || eth0.MTU != 1450:
		t.Errorf("pod's eth0 MAC %s MTU %d, result %+v", eth0.Address, eth0.MTU, resA.Interfaces[1])
	}
	if addrs := guest.In(t, "skvfpa", ipBin, "-4", "addr", "show", "eth0"); !strings.Contains(addrs, resA.IPs[0].Address) {
		t.Errorf("pod's eth0 lacks %s:\n%s", resA.IPs[0].Address, addrs)
	}
	if rt := guest.In(t, "skvfpa", ipBin, "route", "show", "default"); !strings.Contains(rt, "via "+resA.IPs[0].Gateway+" dev eth0") {
		t.Errorf("pod's default route %q, want via %s", rt, resA.IPs[0].Gateway)
	}
	if _, ok := links(t, "")[r.homes[0]]; ok {
		t.Errorf("%s is still in the host namespace", r.homes[0])
	}
	line, mac := vfLine(t, r.pfs[0].PF, 0)
	for _, want := range []string{"spoof checking on", "link-state auto", "trust off"} {
		if !strings.Contains(line, want) || mac != resA.Interfaces[1].Mac || strings.Contains(line, "vlan") {
			t.Errorf("VF 0 on its PF: %q; want MAC %s, no VLAN, %q", line, resA.Interfaces[1].Mac, want)
		}
	}
	guest.Tools.MustPing(t, "skvfpa", ipB, 3, 3*time.Second)
	guest.Tools.MustPing(t, "skvfpb", ipA, 3, 3*time.Second)
	// The encap rule to b, learnt from the first frames.
	testkit.Eventually(t, "an encap rule on the representor "+r.pfs[0].Reps[0], 10*time.Second, func() (bool, string) {
		f := guest.Run(t, guest.TC, "filter", "show", "dev", r.pfs[0].Reps[0], "ingress")
		return strings.Contains(f, "tunnel_key"), f
	})

	r.del(a)
	if _, ok := links(t, "skvfpa")["eth0"]; ok {
		t.Error("eth0 still in the pod after DEL")
	}
	r.allHome(t)
	if out := r.mustCtl("get", "endpoints"); strings.Contains(out, epA) {
		t.Errorf("endpoint %s still at the controller:\n%s", epA, out)
	}

	// The pod's namespace dies with the VF in it: the kernel returns the
	// VF, and the agent's reconcile gives it back, before any DEL.
	r.add(a)
	guest.Run(t, ipBin, "netns", "del", "skvfpa")
	testkit.Eventually(t, "VF 0 given back after its namespace died", 30*time.Second, func() (bool, string) {
		l, ok := links(t, "")[r.homes[0]]
		return ok && l.Alias == "", fmt.Sprintf("%s: %+v", r.homes[0], l)
	})
	r.del(a) // the namespace is gone: DEL still succeeds
	r.allHome(t)
	r.del(b)
}

// refused: an unknown VF, a VF another pod holds, a VF without
// representor and a VF of a PF in legacy mode are refused, naming the
// reason, and leave nothing behind.
func (r *rig) refused(t *testing.T) {
	ns := podNS(t, "skvfpr")
	held := pod{id: "holder", netns: podNS(t, "skvfph"), ifName: "eth0", sock: r.sock1, extra: fmt.Sprintf(`, "deviceID": %q`, r.refs[1].PCI)}
	resH, _ := r.add(held)
	try := func(what, pci, want string) {
		t.Helper()
		p := pod{id: "refused-" + strings.ReplaceAll(what, " ", "-"), netns: ns, ifName: "eth0", sock: r.sock1,
			extra: fmt.Sprintf(`, "runtimeConfig": {"deviceID": %q}`, pci)}
		_, _, err := r.cni("ADD", p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one saying %q", what, err, want)
		}
		if l := links(t, "skvfpr"); len(l) != 1 {
			t.Errorf("%s: the pod has links %v", what, slices.Collect(maps.Keys(l)))
		}
		if out := r.mustCtl("get", "endpoints"); strings.Contains(out, cni.EndpointName(p.id, "eth0")) {
			t.Errorf("%s: an endpoint was left at the controller:\n%s", what, out)
		}
	}
	try("unknown", "0000:7f:09.0", "deviceID 0000:7f:09.0: not a VF of this node")
	try("held", r.refs[1].PCI, "is held by endpoint "+cni.EndpointName(held.id, "eth0"))
	if l := links(t, "skvfph")["eth0"]; !strings.Contains(l.Alias, r.refs[1].PCI) || l.Address != resH.Interfaces[1].Mac {
		t.Errorf("the holder's VF was touched: %+v", l)
	}
	if _, mac := vfLine(t, r.refs[1].PF, r.refs[1].Index); mac != resH.Interfaces[1].Mac {
		t.Errorf("the holder's VF MAC on its PF is %s, want %s", mac, resH.Interfaces[1].Mac)
	}

	// PF 1's VF 0 loses its representor (the overlay no longer shows it).
	p1 := r.pfs[1]
	if err := os.Remove(filepath.Join(p1.Root, "class/net", p1.Reps[0])); err != nil {
		t.Fatal(err)
	}
	try("no representor", p1.Refs[0].PCI, "has no representor")
	p1.LinkRepresentors(t)

	// PF 3 in legacy mode: no representors at all.
	p3 := r.pfs[3]
	devlink := func(mode string) {
		guest.Run(t, "/usr/sbin/devlink", "dev", "eswitch", "set", fmt.Sprintf("netdevsim/netdevsim%d", p3.ID), "mode", mode)
		p3.LinkRepresentors(t)
	}
	devlink("legacy")
	try("legacy", p3.Refs[0].PCI, "not in switchdev mode")
	devlink("switchdev")
	r.del(held)
	r.allHome(t)
}

// cycles: 100 ADD/DEL cycles over the 16 VFs (every tenth pod's
// namespace dies before its DEL); every VF ends at home. With -short
// (make test) 20: every VF taken and given back at least once, and a
// namespace dying twice; make test-kernel-long runs the 100.
func (r *rig) cycles(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 20
	}
	ns := podNS(t, "skvfc")
	start := time.Now()
	for i := range n {
		ref, home := r.refs[i%len(r.refs)], r.homes[i%len(r.refs)]
		p := pod{id: fmt.Sprintf("cycle-%d", i), netns: ns, ifName: "eth0", sock: r.sock1, extra: fmt.Sprintf(`, "runtimeConfig": {"deviceID": %q}`, ref.PCI)}
		_, took := r.add(p)
		if l := links(t, "skvfc")["eth0"]; !strings.Contains(l.Alias, "pci="+ref.PCI) {
			t.Fatalf("cycle %d: the pod's eth0 is %+v, want VF %s", i, l, ref.PCI)
		}
		if i%10 == 9 {
			guest.Run(t, ipBin, "netns", "del", "skvfc")
			r.del(p)
			guest.Run(t, ipBin, "netns", "add", "skvfc")
			guest.In(t, "skvfc", ipBin, "link", "set", "lo", "up")
		} else {
			r.del(p)
		}
		if l, ok := links(t, "")[home]; !ok || l.Alias != "" {
			t.Fatalf("cycle %d: %s not back home unmarked: %+v", i, home, l)
		}
		if i == 0 {
			t.Logf("the first cycle's ADD took %v; n1's agent said:\n%s", took, guest.Tail(r.agent1.Out.String(), 25))
		}
		if i%10 == 9 {
			t.Logf("%d cycles in %v (last ADD %v)", i+1, time.Since(start).Round(time.Second), took)
		}
	}
	r.allHome(t)
}

// latency: 20 VF pod ADDs and 20 veth pod ADDs on the same agent,
// alternating (both see the same load), each followed by its DEL; 5 of
// each with -short (make test).
func (r *rig) latency(t *testing.T) {
	n := 20
	if testing.Short() {
		n = 5
	}
	ns := podNS(t, "skvfl")
	var vfLat, vethLat []time.Duration
	for i := range n {
		ref := r.refs[i%len(r.refs)]
		vfPod := pod{id: fmt.Sprintf("lat-vf-%d", i), netns: ns, ifName: "eth0", sock: r.sock1, extra: fmt.Sprintf(`, "deviceID": %q`, ref.PCI)}
		vethPod := pod{id: fmt.Sprintf("lat-veth-%d", i), netns: ns, ifName: "eth0", sock: r.sock1}
		_, took := r.add(vfPod)
		vfLat = append(vfLat, took)
		r.del(vfPod)
		_, took = r.add(vethPod)
		vethLat = append(vethLat, took)
		r.del(vethPod)
	}
	r.allHome(t)
	p50, p99 := percentiles(vfLat)
	v50, v99 := percentiles(vethLat)
	t.Logf("FIGURE VF ADD latency (skiff-cni exec to result, %d ADDs): p50 %v p99 %v; veth ADD on the same agent, alternating (%d): p50 %v p99 %v",
		len(vfLat), p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(vethLat), v50.Round(time.Millisecond), v99.Round(time.Millisecond))
}

// burst: 16 VF pods added at once, then deleted at once.
func (r *rig) burst(t *testing.T) {
	pods := make([]pod, len(r.refs))
	for i, ref := range r.refs {
		pods[i] = pod{id: fmt.Sprintf("burst-%d", i), netns: podNS(t, fmt.Sprintf("skvfb%d", i)), ifName: "eth0", sock: r.sock1,
			extra: fmt.Sprintf(`, "deviceID": %q`, ref.PCI)}
	}
	run := func(cmd string) (time.Duration, []time.Duration) {
		each := make([]time.Duration, len(pods))
		errs := make([]error, len(pods))
		var wg sync.WaitGroup
		start := time.Now()
		for i := range pods {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, each[i], errs[i] = r.cni(cmd, pods[i])
			}()
		}
		wg.Wait()
		total := time.Since(start)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return total, each
	}
	addAll, adds := run("ADD")
	for i, ref := range r.refs {
		if l := links(t, fmt.Sprintf("skvfb%d", i))["eth0"]; !strings.Contains(l.Alias, "pci="+ref.PCI) {
			t.Errorf("burst pod %d: eth0 %+v, want VF %s", i, l, ref.PCI)
		}
	}
	delAll, _ := run("DEL")
	r.allHome(t)
	p50, p99 := percentiles(adds)
	t.Logf("FIGURE burst of %d VF pods: all ADDs done in %v (each: p50 %v, max %v); all DELs in %v",
		len(pods), addAll.Round(time.Millisecond), p50.Round(time.Millisecond), p99.Round(time.Millisecond), delAll.Round(time.Millisecond))
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	i99 := (len(s)*99+99)/100 - 1
	return s[len(s)/2], s[min(i99, len(s)-1)]
}
