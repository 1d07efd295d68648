package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// TestOverlapAcrossNetworks: two isolated (none) networks may share
// addresses (TestSameCIDROnTwoNetworks); a network routed by the nodes'
// stack (snat, routed) may not overlap any other network, in either
// order of creation, and the refusal stores nothing.
func TestOverlapAcrossNetworks(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, n := range []*skiffv1.Network{
		{Name: "pods", Vni: 100, Egress: "snat"},
		{Name: "flat", Vni: 200, Egress: "routed"},
		{Name: "tenant", Vni: 300},
	} {
		if _, err := s.CreateNetwork(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	create := func(name, net, cidr string) error {
		_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: name, Network: net, Cidr: cidr})
		return err
	}
	if err := create("pods-a", "pods", "198.51.100.0/24"); err != nil {
		t.Fatal(err)
	}
	if err := create("tenant-a", "tenant", "203.0.113.0/24"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, net, cidr, other string }{
		{"tenant-b", "tenant", "198.51.100.128/25", `"pods-a" on network "pods"`}, // none over snat
		{"flat-a", "flat", "198.51.0.0/16", `"pods-a" on network "pods"`},         // routed over snat
		{"flat-b", "flat", "203.0.113.64/26", `"tenant-a" on network "tenant"`},   // routed over none
	} {
		err := create(c.name, c.net, c.cidr)
		var se *store.Error
		if !errors.As(err, &se) || se.Kind != store.Invalid || se.Field != "cidr" || !strings.Contains(err.Error(), c.other) {
			t.Errorf("%s %s on %s: got %v, want Invalid cidr naming %s", c.name, c.cidr, c.net, err, c.other)
		}
		if _, err := s.GetSubnet(ctx, c.name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("refused %s stored: %v", c.name, err)
		}
	}
	if err := create("flat-c", "flat", "192.0.2.0/24"); err != nil {
		t.Errorf("disjoint subnet refused: %v", err)
	}
}

// TestOverlapRace: two overlapping subnets on two snat networks created
// at once: exactly one is stored.
func TestOverlapRace(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for i, name := range []string{"a", "b"} {
		if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: name, Vni: uint32(10 + i), Egress: "snat"}); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, net := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.CreateSubnet(ctx, &skiffv1.Subnet{Name: net + "-s", Network: net, Cidr: "192.0.2.0/24"})
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: want exactly one stored, got errors %v, %v", round, errs[0], errs[1])
		}
		var se *store.Error
		if err := errors.Join(errs...); !errors.As(err, &se) || se.Kind != store.Invalid || se.Field != "cidr" {
			t.Fatalf("round %d: the loser got %v, want Invalid cidr", round, err)
		}
		for _, net := range []string{"a", "b"} {
			if err := s.DeleteSubnet(ctx, net+"-s"); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
}
