package api

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/store"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Plans gives the current plan of a node. Implementations are safe for
// concurrent use.
type Plans interface {
	Plan(node string) plan.Plan
}

// Management implements skiffv1.ManagementServiceServer.
type Management struct {
	skiffv1.UnimplementedManagementServiceServer
	store    *store.Store
	plans    Plans
	counters *counters
	log      *slog.Logger
	remotes  *remoteCache // shared with Agent
}

func (m *Management) guard(ctx context.Context) error { return authorizeAdmin(ctx) }

func (m *Management) CreateNetwork(ctx context.Context, r *skiffv1.CreateNetworkRequest) (*skiffv1.Network, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if r.GetNetwork() == nil {
		return nil, status.Error(codes.InvalidArgument, "network: required")
	}
	n, err := m.store.CreateNetwork(ctx, r.Network)
	if err == nil {
		m.log.Info("network created", "network", n.Name, "vni", n.Vni)
	}
	return n, grpcError("create network", err)
}

func (m *Management) GetNetwork(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Network, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	n, err := m.store.GetNetwork(ctx, r.GetName())
	return n, grpcError("get network", err)
}

func (m *Management) ListNetworks(ctx context.Context, _ *skiffv1.ListRequest) (*skiffv1.ListNetworksResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ns, err := m.store.ListNetworks(ctx)
	if err != nil {
		return nil, grpcError("list networks", err)
	}
	return &skiffv1.ListNetworksResponse{Networks: ns}, nil
}

func (m *Management) DeleteNetwork(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeleteNetwork(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete network", err)
	}
	m.log.Info("network deleted", "network", r.GetName())
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) CreateSubnet(ctx context.Context, r *skiffv1.CreateSubnetRequest) (*skiffv1.Subnet, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if r.GetSubnet() == nil {
		return nil, status.Error(codes.InvalidArgument, "subnet: required")
	}
	s, err := m.store.CreateSubnet(ctx, r.Subnet)
	if err == nil {
		m.log.Info("subnet created", "subnet", s.Name, "network", s.Network, "cidr", s.Cidr)
	}
	return s, grpcError("create subnet", err)
}

func (m *Management) GetSubnet(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Subnet, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	s, err := m.store.GetSubnet(ctx, r.GetName())
	return s, grpcError("get subnet", err)
}

func (m *Management) ListSubnets(ctx context.Context, r *skiffv1.ListRequest) (*skiffv1.ListSubnetsResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ss, err := m.store.ListSubnets(ctx, r.GetNetwork())
	if err != nil {
		return nil, grpcError("list subnets", err)
	}
	return &skiffv1.ListSubnetsResponse{Subnets: ss}, nil
}

func (m *Management) DeleteSubnet(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeleteSubnet(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete subnet", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) CreateEndpoint(ctx context.Context, r *skiffv1.CreateEndpointRequest) (*skiffv1.Endpoint, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	return createEndpoint(ctx, m.store, m.log, r)
}

func createEndpoint(ctx context.Context, st *store.Store, log *slog.Logger, r *skiffv1.CreateEndpointRequest) (*skiffv1.Endpoint, error) {
	if r.GetEndpoint() == nil {
		return nil, status.Error(codes.InvalidArgument, "endpoint: required")
	}
	e, err := st.CreateEndpoint(ctx, r.Endpoint)
	if err != nil {
		return nil, grpcError("create endpoint", err)
	}
	log.Debug("endpoint created", "endpoint", e.Name, "network", e.Network, "node", e.Node, "ips", e.Ips)
	return e, nil
}

func (m *Management) GetEndpoint(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Endpoint, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	e, err := m.store.GetEndpoint(ctx, r.GetName())
	if err != nil {
		return nil, grpcError("get endpoint", err)
	}
	if err := m.store.FillPortStatus(ctx, e); err != nil {
		return nil, grpcError("get endpoint", err)
	}
	m.counters.fill(e)
	return e, nil
}

func (m *Management) ListEndpoints(ctx context.Context, r *skiffv1.ListRequest) (*skiffv1.ListEndpointsResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	es, err := m.store.ListEndpoints(ctx, r.GetNetwork(), r.GetNode())
	if err != nil {
		return nil, grpcError("list endpoints", err)
	}
	if err := m.store.FillPortStatus(ctx, es...); err != nil {
		return nil, grpcError("list endpoints", err)
	}
	m.counters.fill(es...)
	return &skiffv1.ListEndpointsResponse{Endpoints: es}, nil
}

func (m *Management) DeleteEndpoint(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeleteEndpoint(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete endpoint", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) GetNode(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Node, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	n, err := m.store.GetNode(ctx, r.GetName())
	return n, grpcError("get node", err)
}

func (m *Management) ListNodes(ctx context.Context, _ *skiffv1.ListRequest) (*skiffv1.ListNodesResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ns, err := m.store.ListNodes(ctx)
	if err != nil {
		return nil, grpcError("list nodes", err)
	}
	return &skiffv1.ListNodesResponse{Nodes: ns}, nil
}

func (m *Management) DeleteNode(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeleteNode(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete node", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) GetPlan(ctx context.Context, r *skiffv1.GetPlanRequest) (*skiffv1.Plan, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := store.ValidateName("node", r.GetNode()); err != nil {
		return nil, grpcError("get plan", err)
	}
	return m.remotes.planPB(m.plans.Plan(r.GetNode())), nil
}

func (m *Management) Watch(r *skiffv1.WatchRequest, srv skiffv1.ManagementService_WatchServer) error {
	ctx := srv.Context()
	if err := m.guard(ctx); err != nil {
		return err
	}
	kinds := map[string]bool{}
	for _, k := range r.GetKinds() {
		switch k {
		case "network", "subnet", "endpoint", "node":
			kinds[k] = true
		default:
			return status.Errorf(codes.InvalidArgument, "kinds: %q is not one of network, subnet, endpoint, node", k)
		}
	}
	want := func(k string) bool { return len(kinds) == 0 || kinds[k] }
	st, err := m.store.ReadState(ctx, 0)
	if err != nil {
		return grpcError("watch", err)
	}
	if r.GetInitial() {
		if err := m.sendInitial(srv, st, want); err != nil {
			return grpcError("watch", err)
		}
	}
	err = m.store.Watch(ctx, st.Revision, func(rev int64, evs []store.Event) error {
		for _, e := range evs {
			we := &skiffv1.WatchEvent{Type: skiffv1.WatchEvent_TYPE_PUT, Revision: rev}
			if e.Delete {
				we.Type = skiffv1.WatchEvent_TYPE_DELETE
			}
			switch {
			case e.Policy != nil || e.Namespace != nil || e.DPUReady != nil:
				continue
			case e.Status != nil:
				// The agent came or went: the node, with its status.
				if !want("node") {
					continue
				}
				n, err := m.store.GetNode(ctx, e.Status.Node)
				if err != nil {
					continue // deleted meanwhile: its own event says so
				}
				n.Connected = e.Status.Connected
				we.Type = skiffv1.WatchEvent_TYPE_PUT
				we.Object = &skiffv1.WatchEvent_Node{Node: n}
			case !want(e.Kind()):
				continue
			case e.Network != nil:
				we.Object = &skiffv1.WatchEvent_Network{Network: e.Network}
			case e.Subnet != nil:
				we.Object = &skiffv1.WatchEvent_Subnet{Subnet: e.Subnet}
			case e.Endpoint != nil:
				we.Object = &skiffv1.WatchEvent_Endpoint{Endpoint: e.Endpoint}
			case e.Node != nil:
				if !e.Delete {
					// A registration carries no status: read it.
					if n, err := m.store.GetNode(ctx, e.Node.Name); err == nil {
						e.Node.Connected, e.Node.LastSeen = n.Connected, n.LastSeen
					}
				}
				we.Object = &skiffv1.WatchEvent_Node{Node: e.Node}
			default:
				continue
			}
			if err := srv.Send(we); err != nil {
				return err
			}
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return grpcError("watch", err)
}

// sendInitial sends the objects of st that the watch wants, nodes with
// their status at st's revision.
func (m *Management) sendInitial(srv skiffv1.ManagementService_WatchServer, st *store.State, want func(string) bool) error {
	send := func(we *skiffv1.WatchEvent) error {
		we.Type, we.Revision = skiffv1.WatchEvent_TYPE_PUT, st.Revision
		return srv.Send(we)
	}
	if want("network") {
		for _, n := range st.Networks {
			if err := send(&skiffv1.WatchEvent{Object: &skiffv1.WatchEvent_Network{Network: n}}); err != nil {
				return err
			}
		}
	}
	if want("subnet") {
		for _, s := range st.Subnets {
			if err := send(&skiffv1.WatchEvent{Object: &skiffv1.WatchEvent_Subnet{Subnet: s}}); err != nil {
				return err
			}
		}
	}
	if want("endpoint") {
		for _, e := range st.Endpoints {
			if err := send(&skiffv1.WatchEvent{Object: &skiffv1.WatchEvent_Endpoint{Endpoint: e}}); err != nil {
				return err
			}
		}
	}
	if want("node") {
		connected, err := m.store.ConnectedAt(srv.Context(), st.Revision)
		if err != nil {
			return err
		}
		for _, n := range st.Nodes {
			n.Connected = connected[n.Name]
			if err := send(&skiffv1.WatchEvent{Object: &skiffv1.WatchEvent_Node{Node: n}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Management) DeleteNamespace(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeleteNamespace(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete namespace", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) ApplyPolicies(ctx context.Context, r *skiffv1.ApplyPoliciesRequest) (*skiffv1.ApplyPoliciesResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ps, err := m.store.ApplyPolicies(ctx, r.GetDocuments())
	if err != nil {
		return nil, grpcError("apply policies", err)
	}
	for _, p := range ps {
		m.log.Info("policy applied", "policy", p.Namespace+"/"+p.Name)
	}
	return &skiffv1.ApplyPoliciesResponse{Policies: ps}, nil
}

func (m *Management) ListPolicies(ctx context.Context, r *skiffv1.ListPoliciesRequest) (*skiffv1.ListPoliciesResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ps, err := m.store.ListPolicies(ctx, r.GetNamespace())
	if err != nil {
		return nil, grpcError("list policies", err)
	}
	return &skiffv1.ListPoliciesResponse{Policies: ps}, nil
}

func (m *Management) DeletePolicy(ctx context.Context, r *skiffv1.PolicyRef) (*skiffv1.DeleteResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	if err := m.store.DeletePolicy(ctx, r.GetNamespace(), r.GetName()); err != nil {
		return nil, grpcError("delete policy", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

func (m *Management) SetNamespace(ctx context.Context, r *skiffv1.Namespace) (*skiffv1.Namespace, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	n, err := m.store.SetNamespace(ctx, r)
	return n, grpcError("set namespace", err)
}

func (m *Management) ListNamespaces(ctx context.Context, _ *skiffv1.ListRequest) (*skiffv1.ListNamespacesResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ns, err := m.store.ListNamespaces(ctx)
	if err != nil {
		return nil, grpcError("list namespaces", err)
	}
	return &skiffv1.ListNamespacesResponse{Namespaces: ns}, nil
}
