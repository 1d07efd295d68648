package dpuvm

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/cni"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestDPU runs DPU mode's flows on one rig (a rig takes long to start
// under emulation): a host's pod reaches a pod on n2 through the DPU's
// flower rules; with the DPU's agent stopped a CNI ADD on the host fails
// at once naming the DPU while running pods keep forwarding; after a DPU
// reboot the running pod's traffic resumes by itself and a new pod works.
func TestDPU(t *testing.T) {
	extra := 20
	if testing.Short() {
		extra = 6
	}
	r := newRig(t, extra)
	guest.AddNetns(t, "skdpa")
	guest.AddNetns(t, "skdpb")
	a := pod{id: "ctr-a", netns: guest.HoldNetns(t, "skdpa"), sock: r.sockH, vf: 0}
	b := pod{id: "ctr-b", netns: guest.HoldNetns(t, "skdpb"), sock: r.sockN, vf: -1}
	ipB, _ := r.add(b)
	ipA, took := r.add(a)
	t.Logf("CNI ADD of a VF pod on the dpu-host node (DPU connected, offload datapath): %v", took.Round(time.Millisecond))
	epA := cni.EndpointName(a.id, "eth0")
	repA := datapath.HostIfName(epA)

	// The VF is in the pod; the DPU adopted VF 0's representor and put
	// the pod's rules on it and its decap rule on its VXLAN device; the
	// encap rule to b follows the first frames (learnt).
	if _, ok := links(t, "skdpa")["eth0"]; !ok {
		t.Fatalf("the VF is not eth0 in the pod: %v", links(t, "skdpa"))
	}
	if l, ok := links(t, dd)[repA]; !ok || !strings.Contains(l.Alias, "skiff:rep ep="+epA+" home=dr0") {
		t.Fatalf("the DPU did not adopt VF 0's representor dr0 as %s: %+v", repA, links(t, dd))
	}
	if _, ok := links(t, dd)["skb100"]; ok {
		t.Error("the DPU made a bridge: its eswitch is in switchdev mode, the offload datapath should serve the host")
	}
	guest.Tools.MustPing(t, "skdpa", ipB, 3, 3*time.Second)
	guest.Tools.MustPing(t, "skdpb", ipA, 3, 3*time.Second)
	checkRules(t, repA)
	guest.Tools.MustPing(t, "skdpa", ipB, 3, 3*time.Second)
	if n := packets(t, repA); n == 0 {
		t.Errorf("the encap rules on %s counted no packet: the pings did not go through them", repA)
	}

	// The DPU's agent stops: the host's CNI fails fast naming the DPU,
	// running pods keep forwarding on the rules in place.
	stopped := time.Now()
	r.stopDPU(syscall.SIGTERM)
	testkit.Eventually(t, "h1's STATUS says its DPU is away", 30*time.Second, func() (bool, string) {
		_, _, err := r.cni("STATUS", pod{sock: r.sockH})
		return err != nil && strings.Contains(err.Error(), `DPU "d1" is not connected`), fmt.Sprint(err)
	})
	t.Logf("DPU agent stopped -> the host's STATUS says so (checked every 200 ms): %v", time.Since(stopped).Round(time.Millisecond))
	guest.AddNetns(t, "skdpc")
	c := pod{id: "ctr-c", netns: guest.HoldNetns(t, "skdpc"), sock: r.sockH, vf: 1}
	// What a skiff-cni exec and one local API call cost here, just
	// before: under emulation on a loaded machine that alone is seconds,
	// so the ADD's time is logged beside it, not asserted (the e2e suite
	// asserts under a second on the host kernel, TestDPUMode).
	_, base, _ := r.cni("STATUS", pod{sock: r.sockH})
	_, took, err := r.cni("ADD", c)
	t.Logf("CNI ADD on the dpu-host node with its DPU's agent stopped failed in %v (a STATUS just before: %v): %v",
		took.Round(time.Millisecond), base.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), `DPU "d1" is not connected`) || !strings.Contains(err.Error(), "away for") {
		t.Fatalf("ADD with the DPU away: %v", err)
	}
	// The agent's own share, without the exec: a local API Create over a
	// connection already made (what skiff-cni sends).
	api := localapi.NewClient(r.sockH)
	defer api.Close()
	if _, err := api.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = api.Create(context.Background(), localapi.CreateRequest{Name: "api-c", Network: "blue", NetNS: c.netns, IfName: "eth0", DeviceID: vfPCI(1)})
	took = time.Since(start)
	t.Logf("local API Create on the dpu-host node with its DPU's agent stopped (connection made before) failed in %v: %v", took.Round(time.Microsecond), err)
	if err == nil || !strings.Contains(err.Error(), `DPU "d1" is not connected`) {
		t.Fatalf("local API Create with the DPU away: %v", err)
	}
	if _, ok := links(t, dh)["vf1"]; !ok {
		t.Error("VF 1 left the host for a refused ADD")
	}
	if out := r.mustCtl("get", "endpoints"); strings.Contains(out, cni.EndpointName(c.id, "eth0")) {
		t.Errorf("an endpoint was created for the refused ADD:\n%s", out)
	}
	guest.Tools.MustPing(t, "skdpa", ipB, 3, 3*time.Second)
	checkRules(t, repA)

	// The DPU reboots: every kernel object of it gone, every VF of the
	// host re-created in the host (the one in pod a too), its agent
	// started again. The host's agent moves the VF back into pod a, and
	// the running pod's traffic comes back by itself.
	r.reboot()
	rebooted := time.Now()
	testkit.Eventually(t, "the host's agent moved the re-created VF 0 back into pod a", 60*time.Second, func() (bool, string) {
		_, ok := links(t, "skdpa")["eth0"]
		return ok, fmt.Sprint(links(t, "skdpa"), links(t, dh))
	})
	t.Logf("host's VFs re-created -> VF 0 back in pod a as eth0 (the host's agent; links listed every 200 ms): %v", time.Since(rebooted).Round(time.Millisecond))
	if got := guest.In(t, "skdpa", ipBin, "-br", "addr", "show", "dev", "eth0"); !strings.Contains(got, ipA+"/") || !strings.Contains(got, "UP") {
		t.Fatalf("VF 0 back in pod a without its address %s, or down: %s", ipA, got)
	}
	if _, ok := links(t, dh)["vf1"]; !ok {
		t.Errorf("the free VF 1 is not in the host after the reset: %v", links(t, dh))
	}
	if guest.Tools.Ping("skdpa", ipB, 1, time.Second) == nil {
		t.Fatal("the pod still reaches n2 with its DPU's eswitch and rules gone: the reboot stood in for nothing")
	}
	booted := time.Now()
	r.startDPU()
	for guest.Tools.Ping("skdpa", ipB, 1, time.Second) != nil {
		if time.Since(booted) > 60*time.Second {
			t.Fatalf("the host's pod did not reach n2 within 60 s of its DPU's reboot\n%s", guest.Tail(r.dpu.Out.String(), 40))
		}
	}
	t.Logf("DPU rebooted (eswitch and every object re-created, agent started) -> the host's pod reaches n2 again: %v (one ping a second at most)",
		time.Since(booted).Round(time.Millisecond))
	checkRules(t, repA)
	guest.Tools.MustPing(t, "skdpb", ipA, 3, 3*time.Second)

	// A new pod on the host works.
	ipC, took := r.add(c)
	t.Logf("CNI ADD of a VF pod on the dpu-host node after its DPU's reboot: %v", took.Round(time.Millisecond))
	guest.Tools.MustPing(t, "skdpc", ipB, 3, 3*time.Second)
	guest.Tools.MustPing(t, "skdpb", ipC, 3, 3*time.Second)
	if _, _, err := r.cni("DEL", a); err != nil {
		t.Error(err)
	}
	testkit.Eventually(t, "VF 0's representor given its name back after DEL", 30*time.Second, func() (bool, string) {
		l, ok := links(t, dd)["dr0"]
		return ok && l.Alias == "", fmt.Sprint(links(t, dd))
	})
	if _, ok := links(t, dh)["vf0"]; !ok {
		t.Errorf("VF 0 is not back in the host after DEL: %v", links(t, dh))
	}

	r.compareAdds(ipB)
}

// checkRules checks that the DPU has the host endpoint's flower rules on
// its representor rep: an encap rule (tunnel_key set, to the VXLAN
// device; learnt from traffic, so within a few seconds of it), and a
// decap rule on the VXLAN device that sends to the endpoint.
func checkRules(t *testing.T, rep string) {
	t.Helper()
	testkit.Eventually(t, "the flower encap rule on the representor "+rep, 10*time.Second, func() (bool, string) {
		f := guest.In(t, dd, guest.TC, "filter", "show", "dev", rep, "ingress")
		return strings.Contains(f, "flower") && strings.Contains(f, "tunnel_key") && strings.Contains(f, "skvx"), f
	})
	if d := guest.In(t, dd, guest.TC, "filter", "show", "dev", "skvx", "ingress"); !strings.Contains(d, "enc_key_id 100") {
		t.Errorf("no decap rule for VNI 100 on the DPU's VXLAN device:\n%s", d)
	}
}

// packets sums the packet counters of the flower rules on rep's ingress.
func packets(t *testing.T, rep string) int {
	t.Helper()
	n := 0
	for _, l := range strings.Split(guest.In(t, dd, guest.TC, "-s", "filter", "show", "dev", rep, "ingress"), "\n") {
		var b, p int
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "Sent %d bytes %d pkt", &b, &p); err == nil {
			n += p
		}
	}
	return n
}
