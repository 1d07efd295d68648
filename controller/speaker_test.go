package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/bgp"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestBGPServiceRefusesAgents: with mTLS, an agent's certificate may not
// read the BGP tables; an operator's may.
func TestBGPServiceRefusesAgents(t *testing.T) {
	conn := startTLS(t, func(c *Config) { c.BGP = &bgp.Config{ASN: 64512, RouterID: "192.0.2.254", ListenPort: -1} })
	client := func(cn string) skiffv1.BgpServiceClient { return skiffv1.NewBgpServiceClient(conn(cn)) }
	admin := client("admin")
	var (
		r   *skiffv1.ListBgpPeersResponse
		err error
	)
	for range 300 { // wait for the controller
		if r, err = admin.ListBgpPeers(context.Background(), &skiffv1.ListBgpPeersRequest{}); status.Code(err) != codes.Unavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || r.GetLocalAsn() != 64512 || r.GetRouterId() != "192.0.2.254" || len(r.GetPeers()) != 0 {
		t.Fatalf("admin: %v %v", r, err)
	}
	if _, err := client("node:n1").ListBgpRoutes(context.Background(), &skiffv1.ListBgpRoutesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("agent certificate on the BGP API: %v, want PermissionDenied", err)
	}
}

// TestBGPFollowsTheStore runs the controller in-process with BGP and a
// GoBGP peer on loopback: endpoints made through the API are advertised
// with their nodes' VTEPs, a node whose agent goes away is withdrawn, a
// deleted endpoint is withdrawn, and a host the peer advertises reaches
// the plan of the node on that VNI at a new revision.
func TestBGPFollowsTheStore(t *testing.T) {
	sPort, pPort := int32(testkit.FreePort(t)), int32(testkit.FreePort(t))
	peerSrv := server.NewBgpServer(server.LoggerOption(slog.New(slog.DiscardHandler), new(slog.LevelVar)))
	go peerSrv.Serve()
	defer peerSrv.Stop()
	bg := context.Background()
	if err := peerSrv.StartBgp(bg, &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: 64600, RouterId: "192.0.2.100", ListenPort: pPort, ListenAddresses: []string{"127.0.0.1"}}}); err != nil {
		t.Fatal(err)
	}
	evpn := &gobgpapi.Family{Afi: gobgpapi.Family_AFI_L2VPN, Safi: gobgpapi.Family_SAFI_EVPN}
	if err := peerSrv.AddPeer(bg, &gobgpapi.AddPeerRequest{Peer: &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 64512},
		AfiSafis:  []*gobgpapi.AfiSafi{{Config: &gobgpapi.AfiSafiConfig{Family: evpn, Enabled: true}}},
		Transport: &gobgpapi.Transport{RemotePort: uint32(sPort), PassiveMode: true},
	}}); err != nil {
		t.Fatal(err)
	}
	// held lists the peer's EVPN paths as "type mac ip nexthop".
	held := func() []string {
		var out []string
		_ = peerSrv.ListPath(apiutil.ListPathRequest{TableType: gobgpapi.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_EVPN}, func(_ gobgp.NLRI, ps []*apiutil.Path) {
			for _, p := range ps {
				if !p.PeerAddress.IsValid() {
					continue
				}
				var nh string
				for _, a := range p.Attrs {
					if mp, ok := a.(*gobgp.PathAttributeMpReachNLRI); ok {
						nh = mp.Nexthop.String()
					}
				}
				switch d := p.Nlri.(*gobgp.EVPNNLRI).RouteTypeData.(type) {
				case *gobgp.EVPNMacIPAdvertisementRoute:
					out = append(out, fmt.Sprintf("2 %s %s %s", d.MacAddress, d.IPAddress, nh))
				case *gobgp.EVPNMulticastEthernetTagRoute:
					out = append(out, fmt.Sprintf("3 %s %s", d.IPAddress, nh))
				}
			}
		})
		slices.Sort(out)
		return out
	}
	expect := func(what string, want []string) {
		t.Helper()
		slices.Sort(want)
		var got []string
		for range 200 {
			if got = held(); slices.Equal(got, want) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: the peer holds\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	addr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: addr, DataDir: t.TempDir(), StatusTTL: 2 * time.Second, BGP: &bgp.Config{ASN: 64512, RouterID: "192.0.2.254",
			ListenPort: sPort, ListenAddresses: []string{"127.0.0.1"}, Peers: []bgp.Peer{{Address: "127.0.0.1", ASN: 64600, Port: uint32(pPort)}}}},
			slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m, ag := skiffv1.NewManagementServiceClient(cc), skiffv1.NewAgentServiceClient(cc)
	for i := 0; ; i++ {
		if _, err = m.CreateNetwork(bg, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: "blue", Vni: 100}}); status.Code(err) != codes.Unavailable {
			break
		}
		if i > 300 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSubnet(bg, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: "blue-v4", Network: "blue", Cidr: "198.51.100.0/24"}}); err != nil {
		t.Fatal(err)
	}
	streams := map[string]context.CancelFunc{}
	plans := map[string]skiffv1.AgentService_StreamPlanClient{}
	for i, n := range []string{"n1", "n2"} {
		if _, err := ag.Register(bg, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: n, UnderlayIp: fmt.Sprintf("192.0.2.%d", i+1)}}); err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(bg)
		defer scancel()
		s, err := ag.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		streams[n], plans[n] = scancel, s
	}
	eps := map[string]*skiffv1.Endpoint{}
	for _, e := range [][2]string{{"a", "n1"}, {"b", "n2"}} {
		ep, err := m.CreateEndpoint(bg, &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: e[0], Network: "blue", Node: e[1]}})
		if err != nil {
			t.Fatal(err)
		}
		eps[e[0]] = ep
	}
	host := func(e *skiffv1.Endpoint, nh string) string {
		return fmt.Sprintf("2 %s %s %s", e.GetMac(), strings.Split(e.GetIps()[0], "/")[0], nh)
	}
	expect("two endpoints", []string{host(eps["a"], "192.0.2.1"), host(eps["b"], "192.0.2.2"), "3 192.0.2.1 192.0.2.1", "3 192.0.2.2 192.0.2.2"})

	// The peer advertises a host behind 203.0.113.5: n1's plan gets it.
	vtep := netip.MustParseAddr("203.0.113.5")
	rd, _ := gobgp.NewRouteDistinguisherIPAddressAS(vtep, 100)
	t2, _ := gobgp.NewEVPNMacIPAdvertisementRoute(rd, gobgp.EthernetSegmentIdentifier{}, 0, "02:bb:00:00:00:01", netip.MustParseAddr("198.51.100.200"), []uint32{100})
	t3, _ := gobgp.NewEVPNMulticastEthernetTagRoute(rd, 0, vtep)
	id, _ := gobgp.NewIngressReplTunnelID(vtep)
	for _, n := range []*gobgp.EVPNNLRI{t2, t3} {
		mp, _ := gobgp.NewPathAttributeMpReachNLRI(gobgp.RF_EVPN, []gobgp.PathNLRI{{NLRI: n}}, vtep)
		attrs := []gobgp.PathAttributeInterface{gobgp.NewPathAttributeOrigin(0), mp}
		if n == t3 {
			attrs = append(attrs, gobgp.NewPathAttributePmsiTunnel(gobgp.PMSI_TUNNEL_TYPE_INGRESS_REPL, false, 100, id))
		}
		if _, err := peerSrv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: gobgp.RF_EVPN, Nlri: n, Attrs: attrs}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		u, err := plans["n1"].Recv()
		if err != nil {
			t.Fatal(err)
		}
		d := u.GetDelta()
		if d != nil && len(d.GetUpsertRemote()) == 1 && d.GetUpsertRemote()[0].GetVtep() == "203.0.113.5" {
			if d.GetRevision() <= d.GetFromRevision() {
				t.Fatalf("external delta %d -> %d does not advance the revision", d.GetFromRevision(), d.GetRevision())
			}
			r := d.GetUpsertRemote()[0]
			if r.GetMac() != "02:bb:00:00:00:01" || !slices.Equal(r.GetIps(), []string{"198.51.100.200/32"}) || len(d.GetUpsertNetworks()) != 1 ||
				!slices.Contains(d.GetUpsertNetworks()[0].GetFloodVteps(), "203.0.113.5") {
				t.Fatalf("external delta %v", d)
			}
			break
		}
		if i > 20 {
			t.Fatal("n1 never got the external host")
		}
	}

	// n2's agent goes away: after its status lease, b and n2's type 3 go.
	streams["n2"]()
	expect("n2 lost", []string{host(eps["a"], "192.0.2.1"), "3 192.0.2.1 192.0.2.1"})
	// a deleted: nothing left.
	if _, err := m.DeleteEndpoint(bg, &skiffv1.DeleteRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	expect("a deleted", nil)
}
