// Package bgp embeds a GoBGP v4 speaker for the L2VPN EVPN family in
// skiff-controller, so nodes carry no routing daemon.
//
// It advertises what the store calls for (Config.Desired): per (node, VNI)
// with local endpoints a type-3 route (PMSI ingress replication, next hop
// the node's VTEP), per endpoint address a type-2 route (MAC and IP, the
// VNI as label, route target and VXLAN encapsulation communities, next hop
// the node's VTEP). Speaker.Advertise adds and withdraws only the
// difference. Follow drives it from the store's watch and the nodes'
// lease status; every replica following the same store advertises the
// same routes. Type-2 and type-3 routes learned from peers are handed to
// Options.OnLearned (the controller feeds them to the planner as external
// remote endpoints and flood VTEPs); routes of a peer whose session just
// changed state are held for ImportHoldTime, so a flapping peer changes
// nothing downstream.
//
//	cfg := bgp.Config{ASN: 64512, RouterID: "192.0.2.1",
//		Peers: []bgp.Peer{{Address: "192.0.2.254", ASN: 64513}}}
//	sp, err := bgp.New(ctx, cfg, log, bgp.Options{OnLearned: func(rs []bgp.Route) { ... }})
//	if err != nil { ... } // names the bad field: "bgp: peers[0].asn: 0 is not a usable AS number"
//	defer sp.Close()
//	go bgp.Follow(ctx, st, sp, log, time.Second)
//	peers, _ := sp.Peers(ctx)
//	routes, _ := sp.Routes(100) // the EVPN table of VNI 100
package bgp
