package bgp

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Service serves skiff.v1.BgpService from a speaker; a nil speaker means
// BGP is off.
type Service struct {
	skiffv1.UnimplementedBgpServiceServer
	Speaker *Speaker
	// Authorize, when set, is asked before every call (the controller
	// refuses agents' certificates, as on the management API).
	Authorize func(context.Context) error
}

func (s *Service) speaker(ctx context.Context) (*Speaker, error) {
	if s.Authorize != nil {
		if err := s.Authorize(ctx); err != nil {
			return nil, err
		}
	}
	if s.Speaker == nil {
		return nil, status.Error(codes.FailedPrecondition, "bgp: the controller runs without BGP (start it with --bgp-asn)")
	}
	return s.Speaker, nil
}

// ListBgpPeers returns the sessions.
func (s *Service) ListBgpPeers(ctx context.Context, _ *skiffv1.ListBgpPeersRequest) (*skiffv1.ListBgpPeersResponse, error) {
	sp, err := s.speaker(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := sp.Peers(ctx)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &skiffv1.ListBgpPeersResponse{LocalAsn: sp.cfg.ASN, RouterId: sp.cfg.RouterID}
	for _, p := range ps {
		bp := &skiffv1.BgpPeer{Address: p.Address, Asn: p.ASN, State: p.State, Received: p.Received, Accepted: p.Accepted, Advertised: p.Advertised}
		if !p.Uptime.IsZero() {
			bp.UpSince = timestamppb.New(p.Uptime)
		}
		out.Peers = append(out.Peers, bp)
	}
	return out, nil
}

// ListBgpRoutes returns the EVPN table, optionally of one VNI.
func (s *Service) ListBgpRoutes(ctx context.Context, in *skiffv1.ListBgpRoutesRequest) (*skiffv1.ListBgpRoutesResponse, error) {
	sp, err := s.speaker(ctx)
	if err != nil {
		return nil, err
	}
	if in.GetVni() > 16777215 {
		return nil, status.Errorf(codes.InvalidArgument, "vni: must be 0..16777215, got %d", in.GetVni())
	}
	rs, err := sp.Routes(in.GetVni())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &skiffv1.ListBgpRoutesResponse{}
	for _, r := range rs {
		br := &skiffv1.BgpRoute{Type: uint32(r.Type), Vni: r.VNI, Rd: r.RD, RouteTargets: r.RTs, Mac: r.MAC, NextHop: addr(r.NextHop), Peer: addr(r.Peer), Best: r.Best}
		if r.IP.IsValid() {
			br.Ip = r.IP.String()
		}
		if r.Prefix.IsValid() {
			br.Prefix = r.Prefix.String()
		}
		out.Routes = append(out.Routes, br)
	}
	return out, nil
}
