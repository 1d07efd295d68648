package scale

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Setup creates the workload through the management API: nodes
// (registered by their agents), networks and subnets, namespaces,
// endpoints and policies, width calls at a time, and returns how long each
// step took.
func Setup(ctx context.Context, mgmt skiffv1.ManagementServiceClient, fleet *Fleet, w Workload, width int) (*Rates, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	w = w.withDefaults()
	r := &Rates{}
	step := func(what string, n int, fn func(i int) error) error {
		start := time.Now()
		if err := parallel(n, width, fn); err != nil {
			return fmt.Errorf("setup %s: %w", what, err)
		}
		r.add(what, n, time.Since(start).Seconds())
		return nil
	}
	start := time.Now()
	if err := fleet.RegisterAll(ctx, width); err != nil {
		return nil, err
	}
	r.add("nodes registered", len(fleet.Agents), time.Since(start).Seconds())
	nets := w.Networks()
	if err := step("networks and subnets", len(nets), func(i int) error {
		n := nets[i]
		if _, err := mgmt.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: n.Name, Vni: n.VNI}}); err != nil {
			return fmt.Errorf("network %s: %w", n.Name, err)
		}
		// A subnet's creation compares every subnet's revision (no CIDR
		// may overlap another network's unless both are isolated), so
		// creations on other networks make it retry, and after a few
		// attempts it answers Aborted ("retry"), which a client retries.
		return retry(ctx, func() error {
			_, err := mgmt.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: n.Name + "-v4", Network: n.Name, Cidr: n.CIDR}})
			return err
		})
	}); err != nil {
		return nil, err
	}
	if w.Policies > 0 {
		if err := step("namespaces", w.Namespaces, func(i int) error {
			_, err := mgmt.SetNamespace(ctx, &skiffv1.Namespace{Name: fmt.Sprintf("ns%03d", i), Labels: NamespaceLabels(i)})
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := step("endpoints", w.Endpoints(), func(i int) error {
		return CreateEndpoint(ctx, mgmt, w.Endpoint(i))
	}); err != nil {
		return nil, err
	}
	if w.Policies > 0 {
		docs := w.PolicyDocuments(100)
		if err := step("policies (batches of 100)", len(docs), func(i int) error {
			_, err := mgmt.ApplyPolicies(ctx, &skiffv1.ApplyPoliciesRequest{Documents: docs[i]})
			return err
		}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// retryable says whether a failed call may have failed for a transient
// reason: a replica or an etcd member lost, or a transaction that lost too
// many races.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

// retry calls fn until it succeeds or fails for a reason that is not
// transient, for up to a minute.
func retry(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil || !retryable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CreateEndpoint creates e, retrying transient failures for up to a
// minute. A retry that finds the endpoint already there (the earlier
// attempt committed, its answer was lost) checks that it is e.
func CreateEndpoint(ctx context.Context, mgmt skiffv1.ManagementServiceClient, e Endpoint) error {
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := mgmt.CreateEndpoint(cctx, &skiffv1.CreateEndpointRequest{Endpoint: e.PB()})
		cancel()
		switch {
		case err == nil:
			return nil
		case attempt > 0 && status.Code(err) == codes.AlreadyExists:
			got, gerr := mgmt.GetEndpoint(ctx, &skiffv1.GetRequest{Name: e.Name})
			if gerr != nil {
				return fmt.Errorf("endpoint %s: %w (then %v)", e.Name, err, gerr)
			}
			if got.Node != e.Node || got.Network != e.Network {
				return fmt.Errorf("endpoint %s exists on %s/%s, want %s/%s", e.Name, got.Network, got.Node, e.Network, e.Node)
			}
			return nil
		case retryable(err) && time.Now().Before(deadline) && ctx.Err() == nil:
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("endpoint %s: %w", e.Name, err)
		}
	}
}

// DeleteEndpoint deletes an endpoint, retrying transient failures; an
// endpoint already gone after a retry counts as deleted.
func DeleteEndpoint(ctx context.Context, mgmt skiffv1.ManagementServiceClient, name string) error {
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := mgmt.DeleteEndpoint(cctx, &skiffv1.DeleteRequest{Name: name})
		cancel()
		switch {
		case err == nil, attempt > 0 && status.Code(err) == codes.NotFound:
			return nil
		case retryable(err) && time.Now().Before(deadline) && ctx.Err() == nil:
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("delete endpoint %s: %w", name, err)
		}
	}
}
