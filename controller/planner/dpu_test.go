package planner

import (
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// A host's endpoint is placed in its DPU's plan (local, with its VF), seen
// by other nodes behind the DPU's VTEP; the host's plan holds it with the
// DPU's report, and the DPU's status; no remote endpoints.
func TestDPUPlacement(t *testing.T) {
	h := node("h", 1)
	h.Mode, h.DPU = plan.ModeDPUHost, "d"
	d := node("d", 2)
	d.Mode = plan.ModeDPU
	vf := ep("v1", "blue", "h", 10)
	vf.Kind, vf.PF, vf.VFIndex = plan.KindVF, "pf0", 3
	s := State{
		Networks:  []plan.Network{{Name: "blue", VNI: 100}},
		Nodes:     []plan.Node{h, d, node("n3", 3)},
		Endpoints: []plan.Endpoint{vf, ep("b3", "blue", "n3", 11)},
	}
	p := newPlanner()
	p.Load(1, s)
	for n, want := range map[string]string{
		"d":  "ul=192.0.2.2 nets=[blue[192.0.2.3]] local=[v1] remote=[b3@192.0.2.3]",
		"n3": "ul=192.0.2.3 nets=[blue[192.0.2.2]] local=[b3] remote=[v1@192.0.2.2]",
		"h":  "ul=192.0.2.1 nets=[blue[]] local=[v1] remote=[]",
	} {
		if got := summary(p.Plan(n)); got != want {
			t.Errorf("%s: %s, want %s", n, got, want)
		}
	}
	if got := p.Plan("d").Local["v1"]; got.PF != "pf0" || got.VFIndex != 3 || got.DPUReady {
		t.Errorf("the DPU's copy: %+v", got)
	}
	if st := p.Plan("h").DPU; st != (plan.DPUStatus{Node: "d", Registered: true}) {
		t.Errorf("host's DPU status %+v", st)
	}

	// The DPU connects, then reports v1 ready: only the host's plan changes.
	since := time.Unix(1000, 0)
	ds := p.Update(2, []Change{{Status: &NodeStatus{Node: "d", Connected: true, Since: since}}})
	if len(ds) != 1 || ds[0].Node != "h" || ds[0].DPU == nil || !ds[0].DPU.Connected || !ds[0].DPU.Since.Equal(since) {
		t.Fatalf("DPU connects: deltas %+v", ds)
	}
	ds = p.Update(3, []Change{{DPUReady: &EndpointReady{Endpoint: "v1", Ready: true}}})
	if len(ds) != 1 || ds[0].Node != "h" || len(ds[0].UpsertLocal) != 1 || !ds[0].UpsertLocal[0].DPUReady {
		t.Fatalf("DPU reports v1: deltas %+v", ds)
	}
	// It goes away.
	away := time.Unix(2000, 0)
	ds = p.Update(4, []Change{{Status: &NodeStatus{Node: "d", Since: away}}})
	if len(ds) != 1 || ds[0].Node != "h" || ds[0].DPU.Connected || !ds[0].DPU.Since.Equal(away) {
		t.Fatalf("DPU away: deltas %+v", ds)
	}
	// The host stops being one: its endpoint comes home.
	plain := node("h", 1)
	p.Update(5, []Change{{Node: &plain}})
	if got := summary(p.Plan("d")); got != "ul=192.0.2.2 nets=[] local=[] remote=[]" {
		t.Errorf("d after the host left: %s", got)
	}
	if got := summary(p.Plan("n3")); got != "ul=192.0.2.3 nets=[blue[192.0.2.1]] local=[b3] remote=[v1@192.0.2.1]" {
		t.Errorf("n3 after the host left: %s", got)
	}
}

// A host naming a DPU that never registered: its plan says so.
func TestDPUNeverRegistered(t *testing.T) {
	h := node("h", 1)
	h.Mode, h.DPU = plan.ModeDPUHost, "ghost"
	p := newPlanner()
	p.Load(1, State{Nodes: []plan.Node{h}})
	if st := p.Plan("h").DPU; st != (plan.DPUStatus{Node: "ghost"}) {
		t.Errorf("DPU status %+v", st)
	}
}

// A controller loading its state while a host's DPU is away knows since
// when, from the store (State.Away); a connected node's away time is
// ignored.
func TestDPUAwayLoaded(t *testing.T) {
	h := node("h", 1)
	h.Mode, h.DPU = plan.ModeDPUHost, "d"
	h2 := node("h2", 3)
	h2.Mode, h2.DPU = plan.ModeDPUHost, "d2"
	d, d2 := node("d", 2), node("d2", 4)
	d.Mode, d2.Mode = plan.ModeDPU, plan.ModeDPU
	away, back := time.Unix(2000, 0), time.Unix(3000, 0)
	p := newPlanner()
	p.Load(1, State{Nodes: []plan.Node{h, d, h2, d2}, Away: map[string]time.Time{"d": away, "d2": away},
		Connected: map[string]time.Time{"d2": back}})
	if st := p.Plan("h").DPU; st != (plan.DPUStatus{Node: "d", Registered: true, Since: away}) {
		t.Errorf("h's DPU away since the load: %+v", st)
	}
	if st := p.Plan("h2").DPU; st != (plan.DPUStatus{Node: "d2", Registered: true, Connected: true, Since: back}) {
		t.Errorf("h2's DPU connected: %+v", st)
	}
}
