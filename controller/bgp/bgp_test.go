package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/skiff-sdn/skiff/test/testkit"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestValidateNamesTheField(t *testing.T) {
	good := Config{ASN: 64512, RouterID: "192.0.2.1", Peers: []Peer{{Address: "192.0.2.2", ASN: 64513}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"asn zero", func(c *Config) { c.ASN = 0 }, "asn: 0 is not a usable AS number"},
		{"asn reserved", func(c *Config) { c.ASN = 65535 }, "asn: 65535"},
		{"router id garbage", func(c *Config) { c.RouterID = "not-an-ip" }, `routerID: "not-an-ip" is not an IPv4 address`},
		{"router id v6", func(c *Config) { c.RouterID = "2001:db8::1" }, "routerID: 2001:db8::1 must be a unicast IPv4 address"},
		{"router id zero", func(c *Config) { c.RouterID = "0.0.0.0" }, "routerID: 0.0.0.0 must be"},
		{"peer address", func(c *Config) { c.Peers[0].Address = "192.0.2.300" }, `peers[0].address: "192.0.2.300" is not a unicast IP address`},
		{"duplicate peer", func(c *Config) { c.Peers = append(c.Peers, Peer{Address: "192.0.2.2", ASN: 64514}) }, "peers[1].address: 192.0.2.2 duplicates peers[0]"},
		{"peer asn", func(c *Config) { c.Peers[0].ASN = 0 }, "peers[0].asn: 0 is not a usable AS number"},
		{"rr client ebgp", func(c *Config) { c.Peers[0].RouteReflectorClient = true }, "peers[0].routeReflectorClient: only an iBGP peer"},
		{"multihop", func(c *Config) { c.Peers[0].Multihop = 300 }, "peers[0].multihop: 300 is more than 255"},
		{"listen port", func(c *Config) { c.ListenPort = 70000 }, "listenPort: 70000 is not a TCP port"},
		{"network vni", func(c *Config) { c.Networks = []NetworkConfig{{VNI: 0}} }, "networks[0].vni: must be 1..16777215, got 0"},
		{"network rt", func(c *Config) { c.Networks = []NetworkConfig{{VNI: 5, RouteTarget: "nonsense"}} }, `networks[0].routeTarget: "nonsense"`},
		{"network rd", func(c *Config) { c.Networks = []NetworkConfig{{VNI: 5, RD: "x:y:z"}} }, `networks[0].rd: "x:y:z"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Peers = slices.Clone(good.Peers)
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if _, err := New(context.Background(), c, quiet(), Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParsePeer(t *testing.T) {
	p, err := ParsePeer("192.0.2.9,64600")
	if err != nil || p.Address != "192.0.2.9" || p.ASN != 64600 {
		t.Fatalf("got %+v, %v", p, err)
	}
	for _, bad := range []string{"192.0.2.9", "192.0.2.9,x", "192.0.2.9,-1"} {
		if _, err := ParsePeer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

var (
	vtep1 = netip.MustParseAddr("192.0.2.11")
	vtep2 = netip.MustParseAddr("192.0.2.12")
	vtep3 = netip.MustParseAddr("192.0.2.13")
)

func baseState() State {
	return State{
		Networks: []Network{{Name: "blue", VNI: 100}, {Name: "red", VNI: 200}},
		Nodes: []Node{{Name: "n1", VTEP: vtep1, Connected: true}, {Name: "n2", VTEP: vtep2, Connected: true},
			{Name: "n3", VTEP: vtep3, Connected: true}},
		Endpoints: []Endpoint{
			{Name: "a", Network: "blue", Node: "n1", MAC: "02:00:00:00:00:0a", IPs: []netip.Addr{netip.MustParseAddr("198.51.100.10")}},
			{Name: "b", Network: "blue", Node: "n2", MAC: "02:00:00:00:00:0b", IPs: []netip.Addr{netip.MustParseAddr("198.51.100.11")}},
			{Name: "c", Network: "red", Node: "n2", MAC: "02:00:00:00:00:0c"},
		},
	}
}

func strs(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func TestDesired(t *testing.T) {
	base := Config{ASN: 64512, RouterID: "192.0.2.1"}
	configured := base
	configured.Networks = []NetworkConfig{{VNI: 100, RouteTarget: "65000:7", RD: "198.51.100.1:9"}}
	byVTEP := base
	byVTEP.RDFromVTEP = true
	nodes := baseState().Nodes
	one := func(nets []Network, eps ...Endpoint) State {
		return State{Networks: nets, Nodes: nodes, Endpoints: eps}
	}
	a := Endpoint{Name: "a", Network: "blue", Node: "n1", MAC: "02:00:00:00:00:0a"}
	for _, tc := range []struct {
		name string
		cfg  Config
		s    State
		want []string
	}{
		{"defaults", base, baseState(), []string{
			"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0a ip=198.51.100.10 nh=192.0.2.11 rt=64512:100",
			"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0b ip=198.51.100.11 nh=192.0.2.12 rt=64512:100",
			"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100",
			"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.12 nh=192.0.2.12 rt=64512:100",
			"type2 vni=200 rd=192.0.2.1:200 mac=02:00:00:00:00:0c nh=192.0.2.12 rt=64512:200",
			"type3 vni=200 rd=192.0.2.1:200 orig=192.0.2.12 nh=192.0.2.12 rt=64512:200",
		}},
		{"configured RT and RD", configured, one([]Network{{Name: "blue", VNI: 100}}, a), []string{
			"type2 vni=100 rd=198.51.100.1:9 mac=02:00:00:00:00:0a nh=192.0.2.11 rt=65000:7",
			"type3 vni=100 rd=198.51.100.1:9 orig=192.0.2.11 nh=192.0.2.11 rt=65000:7",
		}},
		{"VNI beyond a type-1 RD", base, one([]Network{{Name: "blue", VNI: 100000}}, a), []string{
			"type2 vni=100000 rd=64512:100000 mac=02:00:00:00:00:0a nh=192.0.2.11 rt=64512:100000",
			"type3 vni=100000 rd=64512:100000 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100000",
		}},
		{"RD from the VTEP", byVTEP, one([]Network{{Name: "blue", VNI: 100}}, a), []string{
			"type2 vni=100 rd=192.0.2.11:100 mac=02:00:00:00:00:0a nh=192.0.2.11 rt=64512:100",
			"type3 vni=100 rd=192.0.2.11:100 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100",
		}},
		{"routed network", base, one([]Network{{Name: "blue", VNI: 100, Routed: true, Subnets: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}},
			a, Endpoint{Name: "b", Network: "blue", Node: "n2", MAC: "02:00:00:00:00:0b"}), []string{
			"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0a nh=192.0.2.11 rt=64512:100",
			"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0b nh=192.0.2.12 rt=64512:100",
			"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100",
			"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.12 nh=192.0.2.12 rt=64512:100",
			"type5 vni=100 rd=192.0.2.1:100 prefix=198.51.100.0/24 nh=192.0.2.11 rt=64512:100",
		}},
		{"unknown network, unknown or lost node", base, State{Networks: []Network{{Name: "blue", VNI: 100}},
			Nodes: []Node{{Name: "n1", VTEP: vtep1}}, Endpoints: []Endpoint{a, {Name: "x", Network: "nope", Node: "n1"}, {Name: "y", Network: "blue", Node: "n9"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strs(tc.cfg.Desired(tc.s)); !slices.Equal(got, tc.want) {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestTypeFiveOnTheWire(t *testing.T) {
	sp, p := pair(t, Options{}, time.Second)
	cfg := sp.Config()
	s := State{Networks: []Network{{Name: "blue", VNI: 100, Routed: true, Subnets: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}},
		Nodes: baseState().Nodes, Endpoints: []Endpoint{{Name: "a", Network: "blue", Node: "n1", MAC: "02:00:00:00:00:0a"}}}
	if _, _, err := sp.Advertise(cfg.Desired(s)); err != nil {
		t.Fatal(err)
	}
	expectReceived(t, p, strs(cfg.Desired(s)))
	if !slices.Contains(p.received(t), "type5 vni=100 rd=192.0.2.1:100 prefix=198.51.100.0/24 nh=192.0.2.11 rt=64512:100") {
		t.Fatal("no type-5 route")
	}
}

// peer is a plain GoBGP server playing the remote router.
type peer struct {
	srv  *server.BgpServer
	port int32
}

func startPeer(t testing.TB, asn uint32, routerID string, port int32, skiffPort int32, skiffASN uint32, edit ...func(*api.Peer)) *peer {
	t.Helper()
	srv := server.NewBgpServer(server.LoggerOption(quiet(), new(slog.LevelVar)))
	go srv.Serve()
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: routerID, ListenPort: port, ListenAddresses: []string{"127.0.0.1"}}}); err != nil {
		t.Fatal(err)
	}
	ap := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: skiffASN},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: evpnFamily, Enabled: true}}},
		Transport: &api.Transport{RemotePort: uint32(skiffPort), PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, IdleHoldTimeAfterReset: 1}},
	}
	for _, f := range edit {
		f(ap)
	}
	err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: ap})
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{srv: srv, port: port}
	t.Cleanup(p.stop)
	return p
}

func (p *peer) stop() {
	if p.srv == nil {
		return
	}
	_ = p.srv.StopBgp(context.Background(), &api.StopBgpRequest{})
	p.srv.Stop()
	p.srv = nil
}

// received lists the routes the peer holds from others.
func (p *peer) received(t testing.TB) []string {
	t.Helper()
	var out []Route
	err := p.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_EVPN}, func(_ bgp.NLRI, paths []*apiutil.Path) {
		for _, ap := range paths {
			if r, ok := routeOf(ap); ok && r.Peer.IsValid() {
				r.Peer, r.Best = netip.Addr{}, false
				out = append(out, r)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sortRoutes(out)
	return strs(out)
}

// pair starts Skiff's speaker and a peer connected to it over loopback.
func pair(t testing.TB, opts Options, hold time.Duration) (*Speaker, *peer) {
	t.Helper()
	sPort, pPort := int32(testkit.FreePort(t)), int32(testkit.FreePort(t))
	cfg := Config{ASN: 64512, RouterID: "192.0.2.1", ListenPort: sPort, ListenAddresses: []string{"127.0.0.1"},
		Peers: []Peer{{Address: "127.0.0.1", ASN: 64600, Port: uint32(pPort)}}, ImportHoldTime: Duration{hold}}
	p := startPeer(t, 64600, "192.0.2.100", pPort, sPort, 64512)
	sp, err := New(context.Background(), cfg, quiet(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	testkit.Eventually(t, "session established", 20*time.Second, func() (bool, string) {
		ps, err := sp.Peers(context.Background())
		if err != nil || len(ps) != 1 {
			return false, fmt.Sprint(ps, err)
		}
		return ps[0].State == "established", ps[0].State
	})
	return sp, p
}

func expectReceived(t *testing.T, p *peer, want []string) {
	t.Helper()
	sortStrings := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
	want = sortStrings(want)
	testkit.Eventually(t, "the peer's table", 10*time.Second, func() (bool, string) {
		got := sortStrings(p.received(t))
		return slices.Equal(got, want), "got:\n" + strings.Join(got, "\n") + "\nwant:\n" + strings.Join(want, "\n")
	})
}

func TestPeerReceivesExactRoutesThroughTransitions(t *testing.T) {
	sp, p := pair(t, Options{}, time.Second)
	cfg := sp.Config()
	s := baseState()
	advertise := func(s State) {
		t.Helper()
		if _, _, err := sp.Advertise(cfg.Desired(s)); err != nil {
			t.Fatal(err)
		}
	}
	advertise(s)
	expectReceived(t, p, strs(cfg.Desired(s)))
	// The exact set, spelled out once: the peer sees Skiff's VTEPs as next
	// hops, not the speaker's address.
	expectReceived(t, p, []string{
		"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0a ip=198.51.100.10 nh=192.0.2.11 rt=64512:100",
		"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0b ip=198.51.100.11 nh=192.0.2.12 rt=64512:100",
		"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100",
		"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.12 nh=192.0.2.12 rt=64512:100",
		"type2 vni=200 rd=192.0.2.1:200 mac=02:00:00:00:00:0c nh=192.0.2.12 rt=64512:200",
		"type3 vni=200 rd=192.0.2.1:200 orig=192.0.2.12 nh=192.0.2.12 rt=64512:200",
	})
	// Idempotent: the same state changes nothing.
	if a, w, err := sp.Advertise(cfg.Desired(s)); err != nil || a != 0 || w != 0 {
		t.Fatalf("second advertise: added %d withdrawn %d err %v", a, w, err)
	}

	// Endpoint added on n3.
	s.Endpoints = append(s.Endpoints, Endpoint{Name: "d", Network: "blue", Node: "n3", MAC: "02:00:00:00:00:0d", IPs: []netip.Addr{netip.MustParseAddr("198.51.100.12")}})
	advertise(s)
	expectReceived(t, p, strs(cfg.Desired(s)))
	if !slices.Contains(p.received(t), "type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.13 nh=192.0.2.13 rt=64512:100") {
		t.Fatal("no type-3 route for n3")
	}

	// Endpoint a moved from n1 to n3: same NLRI, new next hop; n1 has no
	// endpoint left in blue, so its type-3 route goes.
	s.Endpoints[0].Node = "n3"
	advertise(s)
	expectReceived(t, p, strs(cfg.Desired(s)))
	got := p.received(t)
	if !slices.Contains(got, "type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0a ip=198.51.100.10 nh=192.0.2.13 rt=64512:100") ||
		slices.Contains(got, "type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.11 nh=192.0.2.11 rt=64512:100") {
		t.Fatalf("move not reflected:\n%s", strings.Join(got, "\n"))
	}

	// Endpoint b deleted.
	s.Endpoints = slices.DeleteFunc(s.Endpoints, func(e Endpoint) bool { return e.Name == "b" })
	advertise(s)
	expectReceived(t, p, strs(cfg.Desired(s)))

	// Node n2 lost (lease expired): its remaining routes (red) go.
	s.Nodes[1].Connected = false
	advertise(s)
	expectReceived(t, p, []string{
		"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0a ip=198.51.100.10 nh=192.0.2.13 rt=64512:100",
		"type2 vni=100 rd=192.0.2.1:100 mac=02:00:00:00:00:0d ip=198.51.100.12 nh=192.0.2.13 rt=64512:100",
		"type3 vni=100 rd=192.0.2.1:100 orig=192.0.2.13 nh=192.0.2.13 rt=64512:100",
	})

	// Network deleted: everything goes.
	s.Networks = nil
	advertise(s)
	expectReceived(t, p, nil)
	if n := len(sp.Advertised()); n != 0 {
		t.Fatalf("%d routes still advertised", n)
	}
}

// originate makes the peer advertise a host (type 2) and its VTEP (type 3)
// on vni, as an FRR VTEP would.
func (p *peer) originate(t testing.TB, vni uint32, vtep netip.Addr, mac string, ip netip.Addr, withdraw bool) {
	t.Helper()
	rd, _ := bgp.NewRouteDistinguisherIPAddressAS(vtep, uint16(vni))
	rt := bgp.NewTwoOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, 64600, vni, true)
	ecs := bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{rt, bgp.NewEncapExtended(bgp.TUNNEL_TYPE_VXLAN)})
	t2, _ := bgp.NewEVPNMacIPAdvertisementRoute(rd, bgp.EthernetSegmentIdentifier{}, 0, mac, ip, []uint32{vni})
	t3, _ := bgp.NewEVPNMulticastEthernetTagRoute(rd, 0, vtep)
	id, _ := bgp.NewIngressReplTunnelID(vtep)
	var paths []*apiutil.Path
	for _, n := range []*bgp.EVPNNLRI{t2, t3} {
		mp, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_EVPN, []bgp.PathNLRI{{NLRI: n}}, vtep)
		if err != nil {
			t.Fatal(err)
		}
		attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), mp, ecs}
		if n == t3 {
			attrs = append(attrs, bgp.NewPathAttributePmsiTunnel(bgp.PMSI_TUNNEL_TYPE_INGRESS_REPL, false, vni, id))
		}
		paths = append(paths, &apiutil.Path{Family: bgp.RF_EVPN, Nlri: n, Attrs: attrs})
	}
	var err error
	if withdraw {
		err = p.srv.DeletePath(apiutil.DeletePathRequest{Paths: paths})
	} else {
		_, err = p.srv.AddPath(apiutil.AddPathRequest{Paths: paths})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// learnedLog records every set handed to OnLearned.
type learnedLog struct {
	mu   sync.Mutex
	sets [][]string
}

func (l *learnedLog) add(rs []Route) {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("type%d vni=%d mac=%s ip=%s nh=%s", r.Type, r.VNI, r.MAC, r.IP, r.NextHop))
	}
	l.mu.Lock()
	l.sets = append(l.sets, s)
	l.mu.Unlock()
}

func (l *learnedLog) last() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.sets) == 0 {
		return nil, 0
	}
	return l.sets[len(l.sets)-1], len(l.sets)
}

func TestImportLearnedRoutesAndHoldThroughFlap(t *testing.T) {
	var log learnedLog
	hold := 8 * time.Second
	sp, p := pair(t, Options{OnLearned: log.add}, hold)
	// Skiff advertises its own endpoint; it must not come back as learned.
	cfg := sp.Config()
	if _, _, err := sp.Advertise(cfg.Desired(baseState())); err != nil {
		t.Fatal(err)
	}
	ext := netip.MustParseAddr("203.0.113.5")
	host := netip.MustParseAddr("198.51.100.200")
	// A route whose next hop is a Skiff node (n3 has no endpoint, so no
	// route of Skiff's own names it) is never imported.
	sp.SetNodeVTEPs([]netip.Addr{vtep1, vtep2, vtep3})
	p.originate(t, 100, vtep3, "02:aa:00:00:00:03", netip.MustParseAddr("198.51.100.203"), false)
	p.originate(t, 100, ext, "02:aa:00:00:00:01", host, false)
	want := []string{
		"type2 vni=100 mac=02:aa:00:00:00:01 ip=198.51.100.200 nh=203.0.113.5",
		"type3 vni=100 mac= ip=203.0.113.5 nh=203.0.113.5",
	}
	testkit.Eventually(t, "learned routes", 10*time.Second, func() (bool, string) {
		got, _ := log.last()
		return slices.Equal(got, want), strings.Join(got, "\n")
	})
	if got := strs(sp.Learned()); len(got) != 2 {
		t.Fatalf("Learned: %v", got)
	}

	// The peer flaps: its session drops and comes back with the same
	// routes within the hold time. Nothing is reported in between.
	_, before := log.last()
	if err := p.srv.ResetPeer(context.Background(), &api.ResetPeerRequest{Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "session down", 10*time.Second, func() (bool, string) {
		ps, _ := sp.Peers(context.Background())
		return len(ps) == 1 && ps[0].State != "established", fmt.Sprint(ps)
	})
	testkit.Eventually(t, "session re-established", 20*time.Second, func() (bool, string) {
		ps, _ := sp.Peers(context.Background())
		return len(ps) == 1 && ps[0].State == "established" && len(p.received(t)) > 0, fmt.Sprint(ps)
	})
	time.Sleep(hold + time.Second)
	if got, after := log.last(); after != before || !slices.Equal(got, want) {
		all, _ := sp.Routes(0)
		ps, _ := sp.Peers(context.Background())
		t.Logf("peers %+v", ps)
		t.Fatalf("flap disturbed the learned set: %d reports before, %d after, last %v; table:\n%s; peer:\n%s", before, after, got, strings.Join(strs(all), "\n"), p.received(t))
	}

	// An explicit withdrawal on a live session is applied at once.
	start := time.Now()
	p.originate(t, 100, ext, "02:aa:00:00:00:01", host, true)
	testkit.Eventually(t, "learned routes withdrawn", 10*time.Second, func() (bool, string) {
		got, _ := log.last()
		return len(got) == 0, strings.Join(got, "\n")
	})
	if took := time.Since(start); took > hold {
		t.Fatalf("withdrawal took %v, longer than the hold time", took)
	}

	// The peer goes away for good: its routes go after the hold time.
	p.originate(t, 100, ext, "02:aa:00:00:00:01", host, false)
	testkit.Eventually(t, "learned again", 10*time.Second, func() (bool, string) {
		got, _ := log.last()
		return slices.Equal(got, want), strings.Join(got, "\n")
	})
	p.stop()
	time.Sleep(hold / 2)
	if got, _ := log.last(); !slices.Equal(got, want) {
		t.Fatalf("routes dropped before the hold time: %v", got)
	}
	testkit.Eventually(t, "routes of the lost peer dropped", 2*hold, func() (bool, string) {
		got, _ := log.last()
		return len(got) == 0, strings.Join(got, "\n")
	})
}

func uniq(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// TestReplicasAdvertiseTheSameRoutes: two speakers with different router
// IDs and RDFromVTEP originate identical routes; the peer keeps every
// route when one of them goes away.
func TestReplicasAdvertiseTheSameRoutes(t *testing.T) {
	pPort := int32(testkit.FreePort(t))
	srv := server.NewBgpServer(server.LoggerOption(quiet(), new(slog.LevelVar)))
	go srv.Serve()
	p := &peer{srv: srv, port: pPort}
	t.Cleanup(p.stop)
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64600, RouterId: "192.0.2.100", ListenPort: pPort, ListenAddresses: []string{"127.0.0.3"}}}); err != nil {
		t.Fatal(err)
	}
	var speakers []*Speaker
	for i, addr := range []string{"127.0.0.1", "127.0.0.2"} {
		err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
			Conf:      &api.PeerConf{NeighborAddress: addr, PeerAsn: 64512},
			AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: evpnFamily, Enabled: true}}},
			Transport: &api.Transport{PassiveMode: true},
		}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{ASN: 64512, RouterID: fmt.Sprintf("192.0.2.%d", 201+i), ListenPort: -1, RDFromVTEP: true,
			Peers: []Peer{{Address: "127.0.0.3", ASN: 64600, Port: uint32(pPort), LocalAddress: addr}}}
		sp, err := New(ctx, cfg, quiet(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sp.Close)
		speakers = append(speakers, sp)
	}
	a, b := speakers[0], speakers[1]
	if !slices.Equal(strs(a.cfg.Desired(baseState())), strs(b.cfg.Desired(baseState()))) {
		t.Fatal("replicas compute different routes")
	}
	for _, sp := range speakers {
		if _, _, err := sp.Advertise(sp.cfg.Desired(baseState())); err != nil {
			t.Fatal(err)
		}
	}
	want := strs(a.cfg.Desired(baseState()))
	if !strings.Contains(want[0], "rd=192.0.2.11:100") {
		t.Fatalf("RD does not come from the VTEP: %s", want[0])
	}
	testkit.Eventually(t, "both replicas' paths", 20*time.Second, func() (bool, string) {
		got := p.received(t)
		return len(got) == 2*len(want) && slices.Equal(uniq(got), uniq(want)), strings.Join(got, "\n")
	})
	a.Close()
	// The peer drops replica a's paths and keeps every route from b.
	testkit.Eventually(t, "replica a's paths gone", 10*time.Second, func() (bool, string) {
		got := p.received(t)
		if !slices.Equal(uniq(got), uniq(want)) {
			t.Fatalf("a route vanished with replica a:\n%s", strings.Join(got, "\n"))
		}
		return len(got) == len(want), strings.Join(got, "\n")
	})
}

// TestPasswordAndIBGPRouteReflectorClient: a TCP MD5 password and an iBGP
// route-reflector client: the session comes up with the right password,
// routes arrive with Skiff's next hops, and a wrong password never
// establishes.
func TestPasswordAndIBGPRouteReflectorClient(t *testing.T) {
	for _, tc := range []struct {
		name, peerPassword string
		up                 bool
	}{{"same password", "s3cret", true}, {"wrong password", "other", false}} {
		t.Run(tc.name, func(t *testing.T) {
			sPort, pPort := int32(testkit.FreePort(t)), int32(testkit.FreePort(t))
			p := startPeer(t, 64512, "192.0.2.100", pPort, sPort, 64512, func(ap *api.Peer) { ap.Conf.AuthPassword = tc.peerPassword })
			cfg := Config{ASN: 64512, RouterID: "192.0.2.1", ListenPort: sPort, ListenAddresses: []string{"127.0.0.1"},
				Peers: []Peer{{Address: "127.0.0.1", ASN: 64512, Port: uint32(pPort), Password: "s3cret", RouteReflectorClient: true}}}
			sp, err := New(context.Background(), cfg, quiet(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			if _, _, err := sp.Advertise(cfg.Desired(baseState())); err != nil {
				t.Fatal(err)
			}
			if tc.up {
				expectReceived(t, p, strs(cfg.Desired(baseState())))
				return
			}
			time.Sleep(5 * time.Second)
			ps, err := sp.Peers(context.Background())
			if err != nil || len(ps) != 1 || ps[0].State == "established" || len(p.received(t)) != 0 {
				t.Fatalf("with a wrong password: %+v %v, peer holds %v", ps, err, p.received(t))
			}
		})
	}
}
