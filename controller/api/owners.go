package api

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Owner records (store/owner.go): an orchestrator's word on the labels of
// its endpoints' owners, and the clean-up of endpoints whose owner or node
// is gone.

func (m *Management) SetOwner(ctx context.Context, r *skiffv1.Owner) (*skiffv1.Owner, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	o, err := m.store.SetOwner(ctx, r)
	if err != nil {
		return nil, grpcError("set owner", err)
	}
	m.log.Debug("owner set", "owner", o.Name, "revision", o.Revision)
	return o, nil
}

func (m *Management) GetOwner(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Owner, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	o, err := m.store.GetOwner(ctx, r.GetName())
	return o, grpcError("get owner", err)
}

func (m *Management) ListOwners(ctx context.Context, r *skiffv1.ListOwnersRequest) (*skiffv1.ListOwnersResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	os, err := m.store.ListOwners(ctx, r.GetNode())
	if err != nil {
		return nil, grpcError("list owners", err)
	}
	return &skiffv1.ListOwnersResponse{Owners: os}, nil
}

func (m *Management) DeleteOwner(ctx context.Context, r *skiffv1.DeleteOwnerRequest) (*skiffv1.DeleteOwnerResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if r.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	eps, err := m.store.DeleteOwner(ctx, r.GetName(), r.GetUid(), r.GetEndpoints())
	if err != nil {
		return nil, grpcError("delete owner", err)
	}
	m.log.Info("owner deleted", "owner", r.GetName(), "endpoints", eps)
	return &skiffv1.DeleteOwnerResponse{Endpoints: eps}, nil
}

func (m *Management) DeleteEndpoints(ctx context.Context, r *skiffv1.DeleteEndpointsRequest) (*skiffv1.DeleteEndpointsResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	eps, err := m.store.DeleteEndpoints(ctx, r.GetNode(), r.GetOwner())
	if len(eps) > 0 {
		m.log.Info("endpoints deleted", "node", r.GetNode(), "owner", r.GetOwner(), "endpoints", eps)
	}
	if err != nil {
		return nil, grpcError("delete endpoints", err)
	}
	return &skiffv1.DeleteEndpointsResponse{Deleted: eps}, nil
}
