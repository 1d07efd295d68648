package dpuvm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// compareAdds creates r.extra VF pods on the dpu-host node h1 and as
// many on the plain offload node o3, alternating, through each agent's
// local API over a connection made before (what skiff-cni sends, without
// the exec, which under emulation costs more than the agent's work), and
// deletes them again the same way. It logs the p50 and p99 (with 20
// pods: the slowest) of both, measured in one run on one machine: on h1
// the VF moves into the pod and the endpoint goes through the DPU's
// agent and the controller and back, on o3 one agent plumbs the VF's
// stand-in and installs its flower rules. Both kinds of pod then reach
// n2's pod at ipB and each other.
func (r *rig) compareAdds(ipB string) {
	t := r.t
	ctx := context.Background()
	host, off := localapi.NewClient(r.sockH), localapi.NewClient(r.sockO)
	defer host.Close()
	defer off.Close()
	for _, c := range []*localapi.Client{host, off} {
		if _, err := c.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type made struct {
		c     *localapi.Client
		req   localapi.CreateRequest
		netns string // the namespace's name
		ip    string
	}
	var pods []made
	var addH, addO, delH, delO []time.Duration
	for i := range r.extra {
		for _, onHost := range []bool{true, false} {
			m := made{c: off, netns: fmt.Sprintf("skdo%d", i)}
			vf := i
			m.req = localapi.CreateRequest{Name: fmt.Sprintf("o3-%d", i), Network: "blue", IfName: "eth0", PF: r.offloadPF, VF: &vf}
			if onHost {
				m.c, m.netns = host, fmt.Sprintf("skdh%d", i)
				m.req = localapi.CreateRequest{Name: fmt.Sprintf("h1-%d", i), Network: "blue", IfName: "eth0", DeviceID: vfPCI(flowVFs + i)}
			}
			guest.AddNetns(t, m.netns)
			m.req.NetNS = guest.HoldNetns(t, m.netns)
			cctx, cancel := context.WithTimeout(ctx, 120*time.Second)
			start := time.Now()
			resp, err := m.c.Create(cctx, m.req)
			took := time.Since(start)
			cancel()
			if err != nil {
				t.Fatalf("create %s: %v", m.req.Name, err)
			}
			m.ip = strings.Split(resp.IPs[0], "/")[0]
			if onHost {
				addH = append(addH, took)
			} else {
				addO = append(addO, took)
			}
			pods = append(pods, m)
		}
	}
	// The first and last of each kind reach n2, and h1's reach o3's.
	for _, m := range []made{pods[0], pods[1], pods[len(pods)-2], pods[len(pods)-1]} {
		guest.Tools.MustPing(t, m.netns, ipB, 3, 3*time.Second)
	}
	guest.Tools.MustPing(t, pods[0].netns, pods[len(pods)-1].ip, 3, 3*time.Second)
	guest.Tools.MustPing(t, pods[len(pods)-1].netns, pods[0].ip, 3, 3*time.Second)
	for _, m := range pods {
		start := time.Now()
		err := m.c.DeleteFrom(ctx, localapi.DeleteRequest{Name: m.req.Name, NetNS: m.req.NetNS, IfName: "eth0"})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("delete %s: %v", m.req.Name, err)
		}
		if m.c == host {
			delH = append(delH, took)
		} else {
			delO = append(delO, took)
		}
	}
	for i := range r.extra {
		if _, ok := links(t, dh)[fmt.Sprintf("vf%d", flowVFs+i)]; !ok {
			t.Errorf("VF %d is not back in the host after its pod's delete: %v", flowVFs+i, links(t, dh))
		}
	}
	for _, row := range []struct {
		what     string
		add, del []time.Duration
	}{{"dpu-host h1, VF pod (DPU d1 adopts the representor, report back through the controller)", addH, delH},
		{"plain offload node o3, VF pod (stand-in veth, flower rules on its netdevsim representor)", addO, delO}} {
		a50, a99 := percentiles(row.add)
		d50, d99 := percentiles(row.del)
		t.Logf("local API on %s, %d pods: create p50 %v p99 %v; delete p50 %v p99 %v", row.what, len(row.add),
			a50.Round(time.Millisecond), a99.Round(time.Millisecond), d50.Round(time.Millisecond), d99.Round(time.Millisecond))
	}
}

// percentiles returns the p50 and p99 of d (nearest rank).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p int) time.Duration { return s[(len(s)*p+99)/100-1] }
	return at(50), at(99)
}
