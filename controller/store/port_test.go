package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// offloadNode registers a node in mode offload with one switchdev PF and
// VFs 0..n-1, each a PCI function (0000:03:00.N+1); VF 0 of "eth9" is on
// a legacy PF.
func offloadNode(t *testing.T, s *store.Store, name, ip string, n int) {
	t.Helper()
	pf := &skiffv1.PhysicalFunction{Name: "eth1", PciAddress: "0000:03:00.0", EswitchMode: "switchdev", NumVfs: uint32(n)}
	for i := range n {
		pf.Vfs = append(pf.Vfs, &skiffv1.VirtualFunction{Index: uint32(i), PciAddress: fmt.Sprintf("0000:03:00.%d", i+1), Representor: fmt.Sprintf("eth1_%d", i)})
	}
	legacy := &skiffv1.PhysicalFunction{Name: "eth9", EswitchMode: "legacy", Vfs: []*skiffv1.VirtualFunction{{Index: 0, PciAddress: "0000:04:00.1"}}}
	_, err := s.RegisterNode(context.Background(), &skiffv1.Node{Name: name, UnderlayIp: ip, Mode: "offload",
		Capabilities: &skiffv1.NodeCapabilities{Pfs: []*skiffv1.PhysicalFunction{pf, legacy}}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVMPortsValidationAndVFReservation(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "sw1", UnderlayIp: "192.0.2.1", Mode: "software"}); err != nil {
		t.Fatal(err)
	}
	offloadNode(t, s, "off1", "192.0.2.2", 2)
	before := dump(t)

	bad := []struct {
		name string
		e    *skiffv1.Endpoint
		kind error
		want string
	}{
		{"tap without owner", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "sw1", Kind: "tap"}, store.ErrInvalid, "owner: kind tap is a VM port: the owner must be vm:ID"},
		{"pod owner", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "sw1", Kind: "tap", Owner: "pod:a/b"}, store.ErrInvalid, "owner must be vm:ID"},
		{"bad VM id", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "sw1", Kind: "tap", Owner: "vm:Bad_ID"}, store.ErrInvalid, `owner: VM id "Bad_ID"`},
		{"unknown node", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "nosuch", Kind: "tap", Owner: "vm:a"}, store.ErrNotFound, `node: node "nosuch" does not exist`},
		{"unknown network", &skiffv1.Endpoint{Name: "p", Network: "nosuch", Node: "sw1", Kind: "tap", Owner: "vm:a"}, store.ErrNotFound, `network: network "nosuch" does not exist`},
		{"tap with pf", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "sw1", Kind: "tap", Owner: "vm:a", Pf: "eth1"}, store.ErrInvalid, "pf: only for kind vf or vfio"},
		{"vfio on software node", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "sw1", Kind: "vfio", Owner: "vm:a"}, store.ErrFailedPrecondition, `vfio on node "sw1": the node runs mode "software"`},
		{"vfio pf without index", &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "off1", Kind: "vfio", Owner: "vm:a", Pf: "eth1"}, store.ErrInvalid, "vfIndex: required with pf"},
	}
	for _, c := range bad {
		_, err := s.CreateEndpoint(ctx, c.e)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %v containing %q", c.name, err, c.kind, c.want)
		}
	}
	if after := dump(t); !maps.Equal(before, after) {
		t.Fatalf("refused creates stored something:\nbefore %v\nafter %v", before, after)
	}

	// A tap port, and a second with the same MAC on the same network.
	tap, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "vm1-0", Network: "blue", Node: "sw1", Kind: "tap", Owner: "vm:vm1", Mac: "02:00:00:00:00:01"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tap.Ips) != 1 || tap.Mac != "02:00:00:00:00:01" {
		t.Fatalf("tap port %v", tap)
	}
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "vm2-0", Network: "blue", Node: "sw1", Kind: "tap", Owner: "vm:vm2", Mac: "02:00:00:00:00:01"}); !errors.Is(err, store.ErrAlreadyExists) || !strings.Contains(err.Error(), `mac: 02:00:00:00:00:01 is already used by endpoint "vm1-0"`) {
		t.Fatalf("same MAC: %v", err)
	}

	// vfio ports pick free VFs of switchdev PFs, until none is left.
	var picked []string
	for i := range 2 {
		e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("v%d", i), Network: "blue", Node: "off1", Kind: "vfio", Owner: "vm:v"})
		if err != nil {
			t.Fatal(err)
		}
		picked = append(picked, fmt.Sprintf("%s/%d", e.Pf, e.GetVfIndex()))
	}
	if strings.Join(picked, " ") != "eth1/0 eth1/1" {
		t.Fatalf("picked %v", picked)
	}
	before = dump(t)
	_, err = s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "v2", Network: "blue", Node: "off1", Kind: "vfio", Owner: "vm:v"})
	if !errors.Is(err, store.ErrExhausted) || !strings.Contains(err.Error(), `node "off1" has no free VF for a vfio port: PF eth1 has 2 VFs, 2 in use; PF eth9 is in eswitch mode "legacy"`) {
		t.Fatalf("no free VF: %v", err)
	}
	// A pod's VF named by the PF's PCI address is the same VF.
	_, err = s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "pod", Network: "blue", Node: "off1", Kind: "vf", Pf: "0000:03:00.0", VfIndex: ptr(int32(1))})
	if !errors.Is(err, store.ErrAlreadyExists) || !strings.Contains(err.Error(), `vfIndex: VF 1 of PF 0000:03:00.0 on node "off1" is already used by endpoint "v1"`) {
		t.Fatalf("VF used twice: %v", err)
	}
	if after := dump(t); !maps.Equal(before, after) {
		t.Fatalf("refused creates stored something")
	}
	// Deleting a port frees its VF.
	if err := s.DeleteEndpoint(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "pod", Network: "blue", Node: "off1", Kind: "vf", Pf: "0000:03:00.0", VfIndex: ptr(int32(1))}); err != nil {
		t.Fatalf("VF freed by delete: %v %v", e, err)
	}
	ports, err := s.ListPorts(ctx, "v", "")
	if err != nil || len(ports) != 1 || ports[0].Name != "v0" {
		t.Fatalf("ports of v: %v %v", ports, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestConcurrentVFIOPicksAreUnique: every concurrent vfio create gets a VF
// of its own, and those beyond the VF count are refused.
func TestConcurrentVFIOPicksAreUnique(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	offloadNode(t, s, "off1", "192.0.2.2", 4)
	var mu sync.Mutex
	got := map[string]string{}
	var refused int
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("v%d", i), Network: "blue", Node: "off1", Kind: "vfio", Owner: "vm:v"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, store.ErrExhausted):
				refused++
			case err != nil:
				t.Errorf("v%d: %v", i, err)
			default:
				vf := fmt.Sprintf("%s/%d", e.Pf, e.GetVfIndex())
				if other, dup := got[vf]; dup {
					t.Errorf("VF %s given to %s and %s", vf, other, e.Name)
				}
				got[vf] = e.Name
			}
		})
	}
	wg.Wait()
	if len(got) != 4 || refused != 4 {
		t.Fatalf("%d VFs given, %d refused: %v", len(got), refused, got)
	}
}

func TestPortStatusReportsAndWait(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	for i, n := range []string{"n1", "n2"} {
		if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: n, UnderlayIp: fmt.Sprintf("192.0.2.%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "p", Network: "blue", Node: "n1", Kind: "tap", Owner: "vm:a"}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		st  *skiffv1.PortStatus
		err error
	}
	done := make(chan res, 1)
	go func() {
		st, err := s.WaitPort(ctx, "p", func(st *skiffv1.PortStatus) bool { return st.Ready })
		done <- res{st, err}
	}()
	// Another node cannot report it; a not-ready report does not end the
	// wait; the ready one does.
	if err := s.SetPortStatus(ctx, "n2", []*skiffv1.PortReport{{Endpoint: "p", Status: &skiffv1.PortStatus{Ready: true, HostIf: "evil"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPortStatus(ctx, "n1", []*skiffv1.PortReport{{Endpoint: "p", Status: &skiffv1.PortStatus{Reason: "not attached yet"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("wait ended early: %v %v", r.st, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.SetPortStatus(ctx, "n1", []*skiffv1.PortReport{{Endpoint: "p", Status: &skiffv1.PortStatus{Ready: true, HostIf: "skp1"}}}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.st.HostIf != "skp1" {
		t.Fatalf("wait: %v %v", r.st, r.err)
	}
	e, _ := s.GetEndpoint(ctx, "p")
	if err := s.FillPortStatus(ctx, e); err != nil || e.Port.GetHostIf() != "skp1" {
		t.Fatalf("filled %v %v", e.Port, err)
	}
	// A report without the port removes its status; deleting the port
	// ends a wait and removes everything.
	if err := s.SetPortStatus(ctx, "n1", nil); err != nil {
		t.Fatal(err)
	}
	e, _ = s.GetEndpoint(ctx, "p")
	if _ = s.FillPortStatus(ctx, e); e.Port != nil {
		t.Fatalf("status stayed: %v", e.Port)
	}
	go func() {
		st, err := s.WaitPort(ctx, "p", func(st *skiffv1.PortStatus) bool { return st.Ready })
		done <- res{st, err}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.DeleteEndpoint(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, store.ErrNotFound) {
		t.Fatalf("wait on deleted port: %v", r.err)
	}
	for k := range dump(t) {
		if strings.Contains(k, "portstatus") || strings.Contains(k, "/endpoints/") {
			t.Errorf("left behind: %s", k)
		}
	}
}
