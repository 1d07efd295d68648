package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
)

var evpnFamily = &api.Family{Afi: api.Family_AFI_L2VPN, Safi: api.Family_SAFI_EVPN}

// Options are the speaker's collaborators, all optional.
type Options struct {
	// OnLearned receives the whole set of usable routes learned from
	// peers each time it changes (see Speaker.Learned).
	OnLearned func([]Route)
	// Registerer receives the speaker's metrics.
	Registerer prometheus.Registerer
}

// Speaker is an embedded GoBGP v4 speaker for the L2VPN EVPN family.
type Speaker struct {
	cfg  Config
	log  *slog.Logger
	srv  *server.BgpServer
	opts Options

	mu         sync.Mutex // serialises Advertise
	advertised map[string]Route
	ownVTEPs   map[netip.Addr]bool // next hops of the advertised routes
	nodeVTEPs  map[netip.Addr]bool // every Skiff node's VTEP (SetNodeVTEPs)

	imp       *importer
	metrics   *metrics
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// PeerStatus is one neighbour's session.
type PeerStatus struct {
	Address    string
	ASN        uint32
	State      string // idle, connect, active, opensent, openconfirm, established
	Uptime     time.Time
	Received   uint64
	Accepted   uint64
	Advertised uint64
}

// New validates cfg, starts the speaker and adds the peers.
func New(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bgp: %w", err)
	}
	if cfg.ImportHoldTime.Duration == 0 {
		cfg.ImportHoldTime.Duration = 10 * time.Second
	}
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelWarn)
	srv := server.NewBgpServer(server.LoggerOption(log.With("component", "gobgp"), lv))
	go srv.Serve()
	port := cfg.ListenPort
	if port == 0 {
		port = 179
	}
	g := &api.Global{Asn: cfg.ASN, RouterId: cfg.RouterID, ListenPort: port, ListenAddresses: cfg.ListenAddresses}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: g}); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("bgp: start (asn %d, router id %s, port %d): %w", cfg.ASN, cfg.RouterID, port, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	s := &Speaker{cfg: cfg, log: log, srv: srv, opts: opts, advertised: map[string]Route{}, ownVTEPs: map[netip.Addr]bool{},
		cancel: cancel, done: make(chan struct{})}
	s.metrics = newMetrics(opts.Registerer, s)
	s.imp = newImporter(s, cfg.ImportHoldTime.Duration)
	cb := server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
			if ev.Type == apiutil.PEER_EVENT_STATE {
				s.imp.peerChanged(ev.Peer.State.NeighborAddress, ev.Peer.State.SessionState == bgp.BGP_FSM_ESTABLISHED)
			}
		},
		// Updates received from peers (not the paths this speaker adds).
		OnPathUpdate: func([]*apiutil.Path, time.Time) { s.imp.kick() },
	}
	if err := srv.WatchEvent(wctx, cb, server.WatchPeer(), server.WatchUpdate(false, "", "")); err != nil {
		cancel()
		srv.Stop()
		return nil, fmt.Errorf("bgp: watch: %w", err)
	}
	go func() { defer close(s.done); s.imp.run(wctx) }()
	for i, p := range cfg.Peers {
		if err := s.addPeer(ctx, p); err != nil {
			s.Close()
			return nil, fmt.Errorf("bgp: peers[%d] %s: %w", i, p.Address, err)
		}
	}
	log.Info("bgp speaker started", "asn", cfg.ASN, "routerID", cfg.RouterID, "port", port, "peers", len(cfg.Peers))
	return s, nil
}

func (s *Speaker) addPeer(ctx context.Context, p Peer) error {
	ap := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: p.Address, PeerAsn: p.ASN, AuthPassword: p.Password},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: evpnFamily, Enabled: true}}},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 2}},
		Transport: &api.Transport{RemotePort: p.Port, PassiveMode: p.Passive, LocalAddress: p.LocalAddress},
	}
	if p.Multihop > 0 {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: p.Multihop}
	}
	if p.RouteReflectorClient {
		ap.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: s.cfg.RouterID}
	}
	return s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: ap})
}

// Close stops the speaker; peers see the session close. Closing twice
// does nothing.
func (s *Speaker) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		_ = s.srv.StopBgp(context.Background(), &api.StopBgpRequest{})
		s.srv.Stop()
		s.metrics.unregister()
	})
}

// Config returns the speaker's configuration (defaults filled in).
func (s *Speaker) Config() Config { return s.cfg }

// Advertise makes the set of routes this speaker originates equal to want:
// it adds (or replaces) what is new or changed and withdraws what is no
// longer wanted. Calling it again with the same set does nothing.
func (s *Speaker) Advertise(want []Route) (added, withdrawn int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]Route, len(want))
	own := map[netip.Addr]bool{}
	for _, r := range want {
		next[r.key()] = r
		own[r.NextHop] = true
	}
	var add, del []*apiutil.Path
	var addKeys []string
	for k, r := range next {
		if old, ok := s.advertised[k]; ok && old.same(r) {
			continue
		}
		p, err := s.path(r)
		if err != nil {
			return 0, 0, fmt.Errorf("bgp: route %s: %w", r, err)
		}
		add = append(add, p)
		addKeys = append(addKeys, k)
	}
	var delKeys []string
	for k, r := range s.advertised {
		if _, ok := next[k]; ok {
			continue
		}
		p, err := s.path(r)
		if err != nil {
			return 0, 0, fmt.Errorf("bgp: route %s: %w", r, err)
		}
		del = append(del, p)
		delKeys = append(delKeys, k)
	}
	s.ownVTEPs = own
	const batch = 2000
	for i := 0; i < len(add); i += batch {
		j := min(i+batch, len(add))
		if _, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: add[i:j]}); err != nil {
			return added, withdrawn, fmt.Errorf("bgp: add paths: %w", err)
		}
		for _, k := range addKeys[i:j] {
			s.advertised[k] = next[k]
		}
		added += j - i
	}
	for i := 0; i < len(del); i += batch {
		j := min(i+batch, len(del))
		if err := s.srv.DeletePath(apiutil.DeletePathRequest{Paths: del[i:j]}); err != nil {
			return added, withdrawn, fmt.Errorf("bgp: withdraw paths: %w", err)
		}
		for _, k := range delKeys[i:j] {
			delete(s.advertised, k)
		}
		withdrawn += j - i
	}
	s.metrics.setAdvertised(s.advertised)
	if added+withdrawn > 0 {
		s.log.Debug("bgp advertisement reconciled", "added", added, "withdrawn", withdrawn, "total", len(s.advertised))
	}
	return added, withdrawn, nil
}

// Advertised returns the routes this speaker originates, sorted.
func (s *Speaker) Advertised() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Route, 0, len(s.advertised))
	for _, r := range s.advertised {
		out = append(out, r)
	}
	sortRoutes(out)
	return out
}

// SetNodeVTEPs tells the speaker the VTEPs of Skiff's nodes: learned
// routes with one of them as next hop are Skiff's own (reflected back, or
// from another replica) and are never imported.
func (s *Speaker) SetNodeVTEPs(vteps []netip.Addr) {
	m := make(map[netip.Addr]bool, len(vteps))
	for _, v := range vteps {
		m[v] = true
	}
	s.mu.Lock()
	s.nodeVTEPs = m
	s.mu.Unlock()
	s.imp.kick()
}

func (s *Speaker) isOwnVTEP(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ownVTEPs[a] || s.nodeVTEPs[a]
}

// path builds the GoBGP path of r.
func (s *Speaker) path(r Route) (*apiutil.Path, error) {
	rd, err := bgp.ParseRouteDistinguisher(r.RD)
	if err != nil {
		return nil, fmt.Errorf("rd: %w", err)
	}
	var comms []bgp.ExtendedCommunityInterface
	for _, x := range r.RTs {
		rt, err := bgp.ParseRouteTarget(x)
		if err != nil {
			return nil, fmt.Errorf("route target %q: %w", x, err)
		}
		comms = append(comms, rt)
	}
	comms = append(comms, bgp.NewEncapExtended(bgp.TUNNEL_TYPE_VXLAN))
	var nlri *bgp.EVPNNLRI
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	switch r.Type {
	case TypeMACIP:
		nlri, err = bgp.NewEVPNMacIPAdvertisementRoute(rd, bgp.EthernetSegmentIdentifier{}, 0, r.MAC, r.IP, []uint32{r.VNI})
	case TypeMulticast:
		nlri, err = bgp.NewEVPNMulticastEthernetTagRoute(rd, 0, r.IP)
		if err == nil {
			id, ierr := bgp.NewIngressReplTunnelID(r.NextHop)
			if ierr != nil {
				return nil, fmt.Errorf("pmsi tunnel id: %w", ierr)
			}
			attrs = append(attrs, bgp.NewPathAttributePmsiTunnel(bgp.PMSI_TUNNEL_TYPE_INGRESS_REPL, false, r.VNI, id))
		}
	case TypePrefix:
		gw := netip.IPv4Unspecified()
		if r.Prefix.Addr().Is6() {
			gw = netip.IPv6Unspecified()
		}
		nlri, err = bgp.NewEVPNIPPrefixRoute(rd, bgp.EthernetSegmentIdentifier{}, 0, uint8(r.Prefix.Bits()), r.Prefix.Addr(), gw, r.VNI)
	default:
		return nil, fmt.Errorf("type %d is not advertised", r.Type)
	}
	if err != nil {
		return nil, err
	}
	mp, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_EVPN, []bgp.PathNLRI{{NLRI: nlri}}, r.NextHop)
	if err != nil {
		return nil, fmt.Errorf("next hop: %w", err)
	}
	attrs = append(attrs, mp, bgp.NewPathAttributeExtendedCommunities(comms))
	return &apiutil.Path{Family: bgp.RF_EVPN, Nlri: nlri, Attrs: attrs}, nil
}

// Peers returns the sessions, sorted by address.
func (s *Speaker) Peers(ctx context.Context) ([]PeerStatus, error) {
	var out []PeerStatus
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		ps := PeerStatus{Address: p.GetConf().GetNeighborAddress(), ASN: p.GetConf().GetPeerAsn(),
			State: strings.ToLower(strings.TrimPrefix(p.GetState().GetSessionState().String(), "SESSION_STATE_"))}
		if t := p.GetTimers().GetState().GetUptime(); t != nil && ps.State == "established" {
			ps.Uptime = t.AsTime()
		}
		for _, a := range p.GetAfiSafis() {
			if st := a.GetState(); st != nil && st.GetFamily().GetSafi() == api.Family_SAFI_EVPN {
				ps.Received, ps.Accepted, ps.Advertised = st.GetReceived(), st.GetAccepted(), st.GetAdvertised()
			}
		}
		out = append(out, ps)
	})
	if err != nil {
		return nil, fmt.Errorf("bgp: list peers: %w", err)
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// Routes returns the EVPN table (originated and learned paths), sorted;
// vni 0 means every VNI.
func (s *Speaker) Routes(vni uint32) ([]Route, error) {
	var out []Route
	err := s.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_EVPN},
		func(_ bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				r, ok := routeOf(p)
				if ok && (vni == 0 || r.VNI == vni) {
					out = append(out, r)
				}
			}
		})
	if err != nil {
		return nil, fmt.Errorf("bgp: list paths: %w", err)
	}
	sortRoutes(out)
	return out, nil
}

// received returns the EVPN paths received from the peers (their
// Adj-RIB-In), without the paths this speaker originates.
func (s *Speaker) received() ([]Route, error) {
	var out []Route
	for _, p := range s.cfg.Peers {
		err := s.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: p.Address, Family: bgp.RF_EVPN},
			func(_ bgp.NLRI, paths []*apiutil.Path) {
				for _, ap := range paths {
					if r, ok := routeOf(ap); ok {
						out = append(out, r)
					}
				}
			})
		if err != nil {
			return nil, fmt.Errorf("bgp: paths of peer %s: %w", p.Address, err)
		}
	}
	return out, nil
}

// routeOf decodes a GoBGP path. Routes of other types, or without a VNI,
// are not reported.
func routeOf(p *apiutil.Path) (Route, bool) {
	n, ok := p.Nlri.(*bgp.EVPNNLRI)
	if !ok || p.Withdrawal {
		return Route{}, false
	}
	r := Route{Peer: p.PeerAddress, Best: p.Best}
	var pmsiLabel uint32
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeMpReachNLRI:
			r.NextHop = a.Nexthop
		case *bgp.PathAttributeNextHop:
			if !r.NextHop.IsValid() {
				r.NextHop = a.Value
			}
		case *bgp.PathAttributeExtendedCommunities:
			for _, c := range a.Value {
				if _, sub := c.GetTypes(); sub == bgp.EC_SUBTYPE_ROUTE_TARGET {
					r.RTs = append(r.RTs, c.String())
				}
			}
		case *bgp.PathAttributePmsiTunnel:
			pmsiLabel = a.Label
		}
	}
	switch d := n.RouteTypeData.(type) {
	case *bgp.EVPNMacIPAdvertisementRoute:
		r.Type, r.RD, r.MAC, r.IP = TypeMACIP, d.RD.String(), d.MacAddress.String(), d.IPAddress
		if len(d.Labels) > 0 {
			r.VNI = d.Labels[0]
		}
	case *bgp.EVPNMulticastEthernetTagRoute:
		r.Type, r.RD, r.IP, r.VNI = TypeMulticast, d.RD.String(), d.IPAddress, pmsiLabel
	case *bgp.EVPNIPPrefixRoute:
		r.Type, r.RD, r.VNI = TypePrefix, d.RD.String(), d.Label
		r.Prefix = netip.PrefixFrom(d.IPPrefix, int(d.IPPrefixLength))
	default:
		return Route{}, false
	}
	if r.VNI == 0 {
		// No label: fall back to a route target of the form ASN:VNI.
		for _, rt := range r.RTs {
			if _, v, ok := strings.Cut(rt, ":"); ok {
				if n, err := strconv.ParseUint(v, 10, 24); err == nil && n > 0 {
					r.VNI = uint32(n)
					break
				}
			}
		}
	}
	return r, r.VNI != 0
}
