package scale

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	"github.com/skiff-sdn/skiff/offload/flower"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// OffloadCompile is the offload scenario, on the wide workload (one pod
// network on every node): node 0 gets local endpoints up to locals
// (created through the management API), its plan is read from the
// controller (GetPlan, what its agent is sent), and the offload
// datapath's compile runs on it: offload/flower's Compile, the code an
// offload agent runs on each whole Apply, with a representor per local
// endpoint and the network's gateway port. Reported: the plan's size, the
// compile's time, its rules (total, per representor, on the VXLAN
// device) and the memory it allocated and holds. The endpoints it made
// are deleted again.
func (e *Env) OffloadCompile(ctx context.Context, locals int) error {
	const sc = "offload"
	if e.Work.Kind != Wide {
		return fmt.Errorf("the offload scenario needs the %s workload (a network on every node)", Wide)
	}
	w := e.Work.withDefaults()
	node, network := NodeName(0), w.Networks()[0].Name
	var extra []Endpoint
	for i := w.EndpointsPerNode; i < locals; i++ {
		extra = append(extra, Endpoint{Name: fmt.Sprintf("%s-o%03d", node, i), Network: network, Node: node,
			Namespace: fmt.Sprintf("ns%03d", i%w.Namespaces), App: fmt.Sprintf("a%02d", i%100)})
	}
	start := time.Now()
	if err := parallel(len(extra), 16, func(i int) error { return CreateEndpoint(ctx, e.Mgmt, extra[i]) }); err != nil {
		return err
	}
	defer func() {
		_ = parallel(len(extra), 16, func(i int) error { return DeleteEndpoint(ctx, e.Mgmt, extra[i].Name) })
	}()
	e.Report.Add(sc, "endpoints created on "+node, "%d in %s", len(extra), secs(time.Since(start)))
	// The controller computes every node's plan; on a network of every
	// node each creation changes them all, so node 0's plan may follow
	// the creations by minutes at thousands of nodes.
	var pb *skiffv1.Plan
	deadline := time.Now().Add(20 * time.Minute)
	for {
		var err error
		pb, err = e.Mgmt.GetPlan(ctx, &skiffv1.GetPlanRequest{Node: node})
		if err == nil && len(pb.GetLocalEndpoints()) >= locals {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's plan has %d local endpoints after 20 minutes, want %d (%v)", node, len(pb.GetLocalEndpoints()), locals, err)
		}
		time.Sleep(time.Second)
	}
	e.Report.Add(sc, "creations -> "+node+"'s plan (GetPlan) holds them", "%s", secs(time.Since(start)))
	if u, err := e.Cluster.Controllers[0].Usage(); err == nil {
		e.Report.Add(sc, "controller RSS then", "%s", mib(u.RSS))
	}
	p, err := planpb.Plan(pb)
	if err != nil {
		return fmt.Errorf("%s's plan: %w", node, err)
	}
	in := offloadInput(p)
	vteps := map[netip.Addr]bool{}
	for _, r := range p.Remote {
		vteps[r.VTEP] = true
	}
	e.Report.Add(sc, node+"'s plan (from GetPlan)", "%d local endpoints, %d remote endpoints behind %d VTEPs, %d networks",
		len(p.Local), len(p.Remote), len(vteps), len(p.Networks))

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start = time.Now()
	rules, err := flower.Compile(p, in)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		return fmt.Errorf("compiling %s's plan: %w", node, err)
	}
	perDev := map[string]int{}
	for _, r := range rules {
		perDev[r.Dev]++
	}
	most := 0
	for _, rep := range in.Reps {
		most = max(most, perDev[rep])
	}
	e.Report.Add(sc, "offload compile of "+node+"'s plan (flower.Compile)", "%s", secs(took))
	e.Report.Add(sc, "rules: total / per representor (most) / on the VXLAN device", "%d / %d / %d", len(rules), most, perDev[in.VXLAN])
	e.Report.Add(sc, "memory: allocated by the compile / heap held with its rules", "%d MiB / %d MiB",
		(after.TotalAlloc-before.TotalAlloc)>>20, after.HeapAlloc>>20)
	runtime.KeepAlive(rules)
	return nil
}

// offloadInput is what an offload node's datapath compiles p with: a
// representor per local endpoint, the VXLAN device, and the gateway port
// of each network with a local endpoint.
func offloadInput(p plan.Plan) flower.Input {
	in := flower.Input{VXLAN: "skvx", Reps: map[string]string{}, Gateways: map[string]flower.Gateway{}}
	for i, name := range slices.Sorted(maps.Keys(p.Local)) {
		in.Reps[name] = fmt.Sprintf("rep%d", i)
		n := p.Networks[p.Local[name].Network]
		if _, ok := in.Gateways[n.Name]; ok {
			continue
		}
		gw := flower.Gateway{Port: fmt.Sprintf("skh%d", n.VNI), MAC: datapath.GatewayMAC(n.VNI)}
		for _, s := range n.Subnets {
			if s.Gateway.IsValid() {
				gw.IPs = append(gw.IPs, s.Gateway)
			}
		}
		in.Gateways[n.Name] = gw
	}
	return in
}
