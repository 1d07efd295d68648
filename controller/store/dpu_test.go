package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Pairings that conflict are refused naming the field, and a refusal
// stores nothing.
func TestDPUPairing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	reg := func(name, ip, mode, dpu string) error {
		_, err := s.RegisterNode(ctx, &skiffv1.Node{Name: name, UnderlayIp: ip, Mode: mode, Dpu: dpu})
		return err
	}
	if err := reg("d1", "192.0.2.11", "dpu", ""); err != nil {
		t.Fatal(err)
	}
	if err := reg("h1", "192.0.2.1", "dpu-host", "d1"); err != nil {
		t.Fatal(err)
	}
	// A host may name a DPU that has not registered yet.
	if err := reg("h3", "192.0.2.3", "dpu-host", "d3"); err != nil {
		t.Fatal(err)
	}
	before, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, node, ip, mode, dpu string
		kind                      error
		want                      string
	}{
		{"two hosts, one DPU", "h2", "192.0.2.2", "dpu-host", "d1", store.ErrAlreadyExists, `dpu: node "d1" is already the DPU of host "h1"`},
		{"a DPU claiming to be a host", "d1", "192.0.2.11", "dpu-host", "d9", store.ErrFailedPrecondition, `mode: node "d1" is the DPU of host "h1"`},
		{"a DPU leaving mode dpu", "d1", "192.0.2.11", "software", "", store.ErrFailedPrecondition, `mode: node "d1" is the DPU of host "h1"`},
		{"an unpaired DPU registering as software", "d3", "192.0.2.13", "software", "", store.ErrFailedPrecondition, `mode: node "d3" is the DPU of host "h3"`},
		{"a host naming a host", "h2", "192.0.2.2", "dpu-host", "h1", store.ErrFailedPrecondition, `dpu: node "h1" is registered in mode "dpu-host", not dpu`},
		{"a host naming no DPU", "h2", "192.0.2.2", "dpu-host", "", store.ErrInvalid, `dpu: node "h2" runs mode dpu-host: it must name its DPU`},
		{"a DPU named by a software node", "h2", "192.0.2.2", "software", "d1", store.ErrInvalid, "dpu: only a node in mode dpu-host names a DPU"},
		{"its own DPU", "h2", "192.0.2.2", "dpu-host", "h2", store.ErrInvalid, `dpu: node "h2" cannot be its own DPU`},
	} {
		err := reg(c.node, c.ip, c.mode, c.dpu)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %v containing %q", c.name, err, c.kind, c.want)
		}
	}
	if after, err := s.Revision(ctx); err != nil || after != before {
		t.Errorf("refused registrations changed the store: revision %d -> %d (%v)", before, after, err)
	}
	// A host that moves to another DPU frees the first.
	if err := reg("h1", "192.0.2.1", "dpu-host", "d2"); err != nil {
		t.Fatal(err)
	}
	if err := reg("h2", "192.0.2.2", "dpu-host", "d1"); err != nil {
		t.Fatalf("d1 not freed by h1: %v", err)
	}
	// Deleting a host frees its DPU.
	if err := s.DeleteNode(ctx, "h2"); err != nil {
		t.Fatal(err)
	}
	if err := reg("d1", "192.0.2.11", "software", ""); err != nil {
		t.Fatalf("d1 still paired after its host was deleted: %v", err)
	}
}

// A DPU's reports reach only its host's endpoints and go with them.
func TestDPUEndpointReports(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	for _, n := range []*skiffv1.Node{
		{Name: "d1", UnderlayIp: "192.0.2.11", Mode: "dpu"},
		{Name: "h1", UnderlayIp: "192.0.2.1", Mode: "dpu-host", Dpu: "d1"},
		{Name: "n2", UnderlayIp: "192.0.2.2", Mode: "software"},
	} {
		if _, err := s.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	vf := int32(0)
	for _, e := range []*skiffv1.Endpoint{
		{Name: "v", Network: "blue", Node: "h1", Kind: "vf", Pf: "pf0", VfIndex: &vf},
		{Name: "o", Network: "blue", Node: "n2"},
	} {
		if _, err := s.CreateEndpoint(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetDPUEndpoints(ctx, "d1", []*skiffv1.DPUEndpointReport{{Endpoint: "v", Ready: true}, {Endpoint: "o", Ready: true}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.ReadState(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.DPUReady) != 1 || st.DPUReady[0].Endpoint != "v" || !st.DPUReady[0].Ready {
		t.Fatalf("reports stored: %v", st.DPUReady)
	}
	// The same report again writes nothing.
	rev, _ := s.Revision(ctx)
	if err := s.SetDPUEndpoints(ctx, "d1", []*skiffv1.DPUEndpointReport{{Endpoint: "v", Ready: true}}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Revision(ctx); again != rev {
		t.Errorf("an unchanged report wrote to the store")
	}
	if err := s.DeleteEndpoint(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if st, err = s.ReadState(ctx, 0); err != nil || len(st.DPUReady) != 0 {
		t.Fatalf("report outlived its endpoint: %v %v", st.DPUReady, err)
	}
}
