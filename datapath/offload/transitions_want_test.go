package offload

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

// What the offload transitions table wants, in pieces: the rules of
// each network and endpoint as the kernel holds them after each step.

// blueLinks are blue's gateway pair (the gateway's MAC and address in
// the node's stack, its port where the rules send what is for it) and
// the VXLAN device; blueQdiscs the clsact of each device with rules but
// pf0vf0, which has someone else's.
const (
	blueLinks = `link skg100 veth mtu 1450 up mac 02:73:6b:00:00:64 alias skiff:gateway:blue peer skh100
link skh100 veth mtu 1450 up alias skiff:gateway-port:blue peer skg100
link skvx vxlan mtu 1450 up alias skiff:vxlan:external external dstport 4789
addr skg100 198.51.100.1/24`
	blueQdiscs = `qdisc pf0vf1 clsact
qdisc skh100 clsact
qdisc skvx clsact`
)

// blueRules are blue's filters: a (198.51.100.10, :0a) on pf0vf0 and b
// (.11, :0b) on pf0vf1 reach each other, the gateway (.1 and its MAC, on
// skh100) and r1 (.5 behind 192.0.2.2); the gateway port and the VXLAN device deliver to a and b.
// (Broadcast and multicast are the replication bridge's: bridged.)
// Each device's chain 0 sends everything to forwarding (chain 3). When
// blue routes out (out), what is delivered to a or b from another
// endpoint or the tunnel gets conntrack's reverse NAT first (a
// Service's reply), and ARP frames for them, which conntrack would
// drop, are delivered by rules of their own.
func blueRules(out bool) string {
	deliver := func(dev string) []string {
		if out {
			return []string{"ct nat", to(dev)}
		}
		return []string{to(dev)}
	}
	decapTo := func(dev string) []string { return append([]string{"tunnel_key unset"}, deliver(dev)...) }
	ls := []string{
		filter("pf0vf0", "0 "+pEntry+" all 0x2", "", "gact goto chain 3"),
		filter("pf0vf0", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.1", to("skh100")),
		filter("pf0vf0", "3 "+pARP+" arp 0x3", "arp_op request arp_tip 198.51.100.11", to("pf0vf1")),
		filter("pf0vf0", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:01", tunnel(100, "192.0.2.2"), to("skvx")),
		filter("pf0vf0", "3 "+pUnicast+" all 0x5", "dst_mac 02:00:00:00:00:0b", deliver("pf0vf1")...),
		filter("pf0vf0", "3 "+pUnicast+" all 0x6", "dst_mac 02:73:6b:00:00:64", to("skh100")),

		filter("pf0vf1", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("pf0vf1", "3 "+pARP+" arp 0x1", "arp_op request arp_tip 198.51.100.1", to("skh100")),
		filter("pf0vf1", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.10", to("pf0vf0")),
		filter("pf0vf1", "3 "+pUnicast+" all 0x3", "dst_mac 02:00:00:00:00:01", tunnel(100, "192.0.2.2"), to("skvx")),
		filter("pf0vf1", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0a", deliver("pf0vf0")...),
		filter("pf0vf1", "3 "+pUnicast+" all 0x5", "dst_mac 02:73:6b:00:00:64", to("skh100")),

		filter("skh100", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("skh100", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.10", to("pf0vf0")),
		filter("skh100", "3 "+pARP+" arp 0x3", "arp_op request arp_tip 198.51.100.11", to("pf0vf1")),
		filter("skh100", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0a", to("pf0vf0")),
		filter("skh100", "3 "+pUnicast+" all 0x5", "dst_mac 02:00:00:00:00:0b", to("pf0vf1")),

		filter("skvx", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("skvx", "3 "+pARP+" arp 0x2", decap(100)+" arp_op request arp_tip 198.51.100.10", "tunnel_key unset", to("pf0vf0")),
		filter("skvx", "3 "+pARP+" arp 0x3", decap(100)+" arp_op request arp_tip 198.51.100.11", "tunnel_key unset", to("pf0vf1")),
		filter("skvx", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0a "+decap(100), decapTo("pf0vf0")...),
		filter("skvx", "3 "+pUnicast+" all 0x5", "dst_mac 02:00:00:00:00:0b "+decap(100), decapTo("pf0vf1")...),
	}
	if !out {
		return lines(ls...)
	}
	return lines(append(ls,
		filter("pf0vf0", "3 "+pARP+" arp 0x8", "dst_mac 02:00:00:00:00:0b", to("pf0vf1")),
		filter("pf0vf1", "3 "+pARP+" arp 0x7", "dst_mac 02:00:00:00:00:0a", to("pf0vf0")),
		filter("skvx", "3 "+pARP+" arp 0x8", "dst_mac 02:00:00:00:00:0a "+decap(100), "tunnel_key unset", to("pf0vf0")),
		filter("skvx", "3 "+pARP+" arp 0x9", "dst_mac 02:00:00:00:00:0b "+decap(100), "tunnel_key unset", to("pf0vf1")),
	)...)
}

// r2Rules are the rules of the remote endpoint r2 (198.51.100.6, :02)
// behind vtep on a's and b's representors.
func r2Rules(vtep string) string {
	return lines(
		filter("pf0vf0", "3 "+pUnicast+" all 0x7", "dst_mac 02:00:00:00:00:02", tunnel(100, vtep), to("skvx")),
		filter("pf0vf1", "3 "+pUnicast+" all 0x6", "dst_mac 02:00:00:00:00:02", tunnel(100, vtep), to("skvx")))
}

// red is the second network: c (203.0.113.10, :0c) on pf0vf2, its
// gateway (203.0.113.1) on skh200; it floods to 192.0.2.2 and 192.0.2.3
// (redRepl).
var red = lines(`link skg200 veth mtu 1400 up mac 02:73:6b:00:00:c8 alias skiff:gateway:red peer skh200
link skh200 veth mtu 1400 up alias skiff:gateway-port:red peer skg200
addr skg200 203.0.113.1/24
qdisc pf0vf2 clsact
qdisc skh200 clsact`,
	filter("pf0vf2", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
	filter("pf0vf2", "3 "+pARP+" arp 0x1", "arp_op request arp_tip 203.0.113.1", to("skh200")),
	filter("pf0vf2", "3 "+pUnicast+" all 0x2", "dst_mac 02:73:6b:00:00:c8", to("skh200")),
	filter("skh200", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
	filter("skh200", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 203.0.113.10", to("pf0vf2")),
	filter("skh200", "3 "+pUnicast+" all 0x3", "dst_mac 02:00:00:00:00:0c", to("pf0vf2")),
	filter("skvx", "3 "+pARP+" arp 0x6", decap(200)+" arp_op request arp_tip 203.0.113.10", "tunnel_key unset", to("pf0vf2")),
	filter("skvx", "3 "+pUnicast+" all 0x7", "dst_mac 02:00:00:00:00:0c "+decap(200), "tunnel_key unset", to("pf0vf2")))

// blueHost is blue's host port when it routes out: the node's end skn100
// (the node's address and host MAC) and its eswitch side sknp100, whose
// rules encapsulate the node's packets to r1 and r2 (both behind
// 192.0.2.2); r1 and r2 routed through skn100 from the node's address;
// the other node with a host port (192.0.2.2) in blue's table out of the
// gateway, to its host MAC, which skh100 encapsulates to it, and the
// tunnel's packets for the node's host MAC delivered to sknp100; the
// gateway forwards (IPv6 forwarding on it too: it answers as a router),
// the node forwards, red's gateway does not.
var blueHost = lines(`link skn100 veth mtu 1450 up mac 06:64:c0:00:02:01 alias skiff:host:blue peer sknp100
link sknp100 veth mtu 1450 up alias skiff:host-port:blue peer skn100
addr skn100 192.0.2.1/32
neigh skg100 192.0.2.2 lladdr 06:64:c0:00:02:02
neigh skn100 198.51.100.5 lladdr 02:00:00:00:00:01
neigh skn100 198.51.100.6 lladdr 02:00:00:00:00:02
route 198.51.100.5/32 dev skn100 src 192.0.2.1
route 198.51.100.6/32 dev skn100 src 192.0.2.1
route 192.0.2.2/32 dev skg100 table 1392509028
rule pref 2500 iif skg100 lookup 1392509028
sysctl net/ipv4/ip_forward = 1
sysctl net/ipv6/conf/skg100/forwarding = 1
sysctl net/ipv4/conf/skg200/forwarding = 0
qdisc sknp100 clsact`,
	filter("skh100", "3 "+pUnicast+" all 0x6", "dst_mac 06:64:c0:00:02:02", tunnel(100, "192.0.2.2"), to("skvx")),
	filter("sknp100", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
	filter("sknp100", "3 "+pUnicast+" all 0x2", "dst_mac 02:00:00:00:00:01", tunnel(100, "192.0.2.2"), to("skvx")),
	filter("sknp100", "3 "+pUnicast+" all 0x3", "dst_mac 02:00:00:00:00:02", tunnel(100, "192.0.2.2"), to("skvx")),
	filter("skvx", "3 "+pUnicast+" all 0xa", "dst_mac 06:64:c0:00:02:01 "+decap(100), "tunnel_key unset", to("sknp100")))

// isolation is the table of the node's stack (inet skiff) with the
// isolate chain's rules, then other chains.
func isolation(rules ...string) string {
	return lines(append([]string{"table inet skiff", "  chain isolate type filter hook forward priority 0; policy accept;"}, rules...)...)
}

// none are the isolation rules of the gateway of a network whose
// egress is none: nothing routed into another network, out, or in.
func none(gw string) string {
	return strings.NewReplacer("GW", gw).Replace(`    iifname "GW" oifname "skb*" oifname != "GW" drop  # x:GW>skb!GW
    iifname "GW" oifname "skn*" oifname != "GW" drop  # x:GW>skn!GW
    iifname "GW" oifname "skg*" oifname != "GW" drop  # x:GW>skg!GW
    iifname "GW" oifname != "skb*" oifname != "skn*" oifname != "skg*" drop  # none:GW
    iifname != "skb*" iifname != "skn*" iifname != "skg*" oifname "GW" drop  # in:GW`)
}

// blueOut are the isolation rules of blue routing out: its gateway and
// host port count as one network's, routed into no other; then (after
// red's rules) what the node lets back through to the gateway is
// marked for its port's pipeline, and no ICMPv6 redirect leaves it.
const (
	blueOut = `    iifname "skg100" oifname "skb*" oifname != "skg100" oifname != "skn100" drop  # x:skg100>skb!skg100,skn100
    iifname "skg100" oifname "skn*" oifname != "skg100" oifname != "skn100" drop  # x:skg100>skn!skg100,skn100
    iifname "skg100" oifname "skg*" oifname != "skg100" oifname != "skn100" drop  # x:skg100>skg!skg100,skn100
    iifname "skn100" oifname "skb*" oifname != "skg100" oifname != "skn100" drop  # x:skn100>skb!skg100,skn100
    iifname "skn100" oifname "skn*" oifname != "skg100" oifname != "skn100" drop  # x:skn100>skn!skg100,skn100
    iifname "skn100" oifname "skg*" oifname != "skg100" oifname != "skn100" drop  # x:skn100>skg!skg100,skn100`
	blueMasquerade = `  chain egress type nat hook postrouting priority 100; policy accept;
    iifname "skg100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade  # snat:skg100
    iifname "skn100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade  # snat:skn100`
	blueReplies = `  chain replies type filter hook postrouting priority -150; policy accept;
    oifname "skg100" ct state established,related meta mark set mark | 0x200000  # reply:skg100:0x200000
  chain noredirect type filter hook output priority 0; policy accept;
    oifname "skg100" icmpv6 type 137 drop  # noredirect:skg100`
)

// policy is NetworkPolicy on blue: a isolated for egress (TCP 443 to
// the group web), b for ingress (TCP 80 from web); web's members are
// r1 (198.51.100.5) and, when joined, r2 (.6). Every device of blue
// sends IPv4 into conntrack (zone 101) and on to chain 1: established
// and related connections go to forwarding, a new one through its
// source's egress rules (chain 1: a's to web:443, the rest open) and
// its destination's ingress rules (chain 2: b's from web:80, else
// dropped); a's IPv6 is dropped; what a sends to the gateway's MAC
// skips its egress rules (the node's stack checks it: the egress table
// below), and on the gateway port what the node let back through (the
// reply mark) goes straight to forwarding.
func policy(joined bool) string {
	ls := []string{
		filter("pf0vf0", "0 "+pCt+" ip 0xa", "", "ct zone 101", "gact goto chain 1"),
		filter("pf0vf0", "0 "+pCt6+" ipv6 0xb", "", "gact drop"),
		filter("pf0vf0", "1 "+pCt+" ip 0x5", "ct_state +trk+est", "gact goto chain 3"),
		filter("pf0vf0", "1 "+pCt6+" ip 0x6", "ct_state +trk+rel", "gact goto chain 3"),
		filter("pf0vf0", "1 "+pGateway+" ip 0x7", "dst_mac 02:73:6b:00:00:64", "gact goto chain 3"),
		filter("pf0vf0", "1 "+pRule+" ip 0x8", "ip_proto tcp dst_ip 198.51.100.5/32 dst_port 443 ct_state +trk+new", "gact goto chain 2"),
		filter("pf0vf0", "1 "+pDeny+" ip 0x9", "", "gact drop"),
		filter("pf0vf0", "2 "+pDeny+" ip 0x3", "dst_ip 198.51.100.11/32", "gact drop"),
		filter("pf0vf0", "2 "+pOpen+" ip 0x4", "", "ct commit zone 101", "gact goto chain 3"),

		filter("pf0vf1", "0 "+pCt+" ip 0x7", "", "ct zone 101", "gact goto chain 1"),
		filter("pf0vf1", "0 "+pCt6+" ipv6 0x8", "", "gact drop"),
		filter("pf0vf1", "1 "+pCt+" ip 0x3", "ct_state +trk+est", "gact goto chain 3"),
		filter("pf0vf1", "1 "+pCt6+" ip 0x4", "ct_state +trk+rel", "gact goto chain 3"),
		filter("pf0vf1", "1 "+pGateway+" ip 0x5", "dst_mac 02:73:6b:00:00:64", "gact goto chain 3"),
		filter("pf0vf1", "1 "+pOpen+" ip 0x6", "", "gact goto chain 2"),
		filter("pf0vf1", "2 "+pOpen+" ip 0x2", "", "ct commit zone 101", "gact goto chain 3"),

		"filter skh100 ingress chain 0 prio " + pReply + " protocol all handle 0x200000 fw mark 0x200000/0x200000 action gact goto chain 3 cookie 736b5001…",
	}
	for _, d := range []struct {
		dev, ct, est, rel, open, rule, deny, commit, decap string
	}{
		{"skh100", "0x9", "0x5", "0x6", "0x7", "0x2", "0x3", "0x4", ""},
		{"sknp100", "0x8", "0x5", "0x6", "0x7", "0x2", "0x3", "0x4", ""},
		{"skvx", "0x8", "0x5", "0x6", "0x7", "0x2", "0x3", "0x4", "enc_key_id 100"},
	} {
		vni := func(m string) string { return strings.TrimSpace(d.decap + " " + m) }
		ls = append(ls,
			filter(d.dev, "0 "+pCt+" ip "+d.ct, d.decap, "ct zone 101", "gact goto chain 1"),
			filter(d.dev, "1 "+pCt+" ip "+d.est, "ct_state +trk+est", "gact goto chain 3"),
			filter(d.dev, "1 "+pCt6+" ip "+d.rel, "ct_state +trk+rel", "gact goto chain 3"),
			filter(d.dev, "1 "+pOpen+" ip "+d.open, d.decap, "gact goto chain 2"),
			filter(d.dev, "2 "+pRule+" ip "+d.rule, vni("ip_proto tcp src_ip 198.51.100.5/32 dst_ip 198.51.100.11/32 dst_port 80 ct_state +trk+new"),
				"ct commit zone 101", "gact goto chain 3"),
			filter(d.dev, "2 "+pDeny+" ip "+d.deny, vni("dst_ip 198.51.100.11/32"), "gact drop"),
			filter(d.dev, "2 "+pOpen+" ip "+d.commit, d.decap, "ct commit zone 101", "gact goto chain 3"))
	}
	members := "    198.51.100.5"
	if joined {
		members += "\n    198.51.100.6"
		ls = append(ls, filter("pf0vf0", "1 "+pRule+" ip 0xc", "ip_proto tcp dst_ip 198.51.100.6/32 dst_port 443 ct_state +trk+new", "gact goto chain 2"))
		for dev, h := range map[string]string{"skh100": "0xa", "sknp100": "0x9", "skvx": "0x9"} {
			m := "ip_proto tcp src_ip 198.51.100.6/32 dst_ip 198.51.100.11/32 dst_port 80 ct_state +trk+new"
			if dev == "skvx" {
				m = "enc_key_id 100 " + m
			}
			ls = append(ls, filter(dev, "2 "+pRule+" ip "+h, m, "ct commit zone 101", "gact goto chain 3"))
		}
	}
	return lines(append(ls, `table inet skiff-policy
  set web-4 ipv4_addr
`+members+`
  set web-6 ipv6_addr
  chain forward type filter hook forward priority 0; policy accept;
    ct state established,related accept  # established
    iifname "skg100" meta nfproto ipv4 ip saddr 198.51.100.10 jump out-a
  chain out-a
    meta nfproto ipv4 ip daddr @web-4 meta l4proto 6 th dport 443 counter return  # a\x00out\x000
    meta nfproto ipv6 ip6 daddr @web-6 meta l4proto 6 th dport 443 counter return  # a\x00out\x000
    meta nfproto ipv6 icmpv6 type 133-137 return  # nd
    counter drop  # a\x00out\x00drop`)...)
}

// blue and red on the replication bridge, in the order they came: blue
// with a, b and r1 (blueRepl), and r2 behind a VTEP (blueWithR2).
var (
	blueRepl = replicated{vid: 1, vni: 100, reps: []string{"pf0vf0", "pf0vf1"}, gw: "skh100", gwIP: "198.51.100.1", vteps: []string{"192.0.2.2"},
		hosts: []host{{"pf0vf0", "02:00:00:00:00:0a", "", "198.51.100.10"}, {"pf0vf1", "02:00:00:00:00:0b", "", "198.51.100.11"},
			{"skvx", "02:00:00:00:00:01", "192.0.2.2", "198.51.100.5"}}}
	redRepl = replicated{vid: 2, vni: 200, reps: []string{"pf0vf2"}, gw: "skh200", gwIP: "203.0.113.1", vteps: []string{"192.0.2.2", "192.0.2.3"},
		hosts: []host{{"pf0vf2", "02:00:00:00:00:0c", "", "203.0.113.10"}}}
)

func blueWithR2(vtep string) replicated {
	r := blueRepl
	r.hosts = append(slices.Clone(r.hosts), host{"skvx", "02:00:00:00:00:02", vtep, "198.51.100.6"})
	return r
}

// replicated is a network on the replication bridge: its VLAN, its
// VNI, the representors of its endpoints, its gateway's port, the
// VTEPs it floods to, the gateway's address, and the endpoints whose
// neighbour requests the bridge answers (hosts).
type replicated struct {
	vid, vni int
	reps     []string
	gw, gwIP string
	vteps    []string
	hosts    []host
}

// host is an endpoint of a replicated network: the bridge port its MAC
// is on (skvx for a remote endpoint, behind vtep) and its address.
type host struct{ dev, mac, vtep, ip string }

// bridged is state (nltest.Expect's) with the replication path of nets:
// the bridge skrb (its MTU the least of its ports'), the representors,
// gateway ports and the VXLAN device as its ports (learning and
// unknown-unicast flooding off; the gateway ports and skvx isolated,
// skvx mapping VLANs to VNIs, neigh_suppress on skvx), each port's
// VLAN, skvx's flood entries, and the neighbour suppression of each
// network: its VLAN device skrb.VID holding each host's address, each
// host's MAC and the gateway's in the bridge (and a remote one in skvx's
// table).
func bridged(state string, nets ...replicated) string {
	suffix := map[string]string{}
	var extra []string
	const port = " master skrb learning off neigh_suppress off hairpin off flood off"
	for _, n := range nets {
		for _, r := range n.reps {
			suffix[r] = port
			extra = append(extra, fmt.Sprintf("vlan %s %d access", r, n.vid))
		}
		if n.gw != "" {
			suffix[n.gw] = port + " isolated on"
			extra = append(extra, fmt.Sprintf("vlan %s %d access", n.gw, n.vid),
				fmt.Sprintf("fdb %s %s master static vlan %d", n.gw, datapath.GatewayMAC(uint32(n.vni)), n.vid))
			if n.gwIP != "" {
				extra = append(extra, fmt.Sprintf("neigh skrb.%d %s lladdr %s", n.vid, n.gwIP, datapath.GatewayMAC(uint32(n.vni))))
			}
		}
		suffix["skvx"] = strings.Replace(port, "neigh_suppress off", "neigh_suppress on", 1) + " isolated on vlan_tunnel on"
		extra = append(extra, fmt.Sprintf("vlan skvx %d tunnel %d", n.vid, n.vni))
		for _, v := range n.vteps {
			extra = append(extra, fmt.Sprintf("fdb skvx 00:00:00:00:00:00 dst %s self permanent vni %d src_vni %d", v, n.vni, n.vni))
		}
		for _, h := range n.hosts {
			extra = append(extra, fmt.Sprintf("fdb %s %s master static vlan %d", h.dev, h.mac, n.vid),
				fmt.Sprintf("neigh skrb.%d %s lladdr %s", n.vid, h.ip, h.mac))
			if h.vtep != "" {
				extra = append(extra, fmt.Sprintf("fdb skvx %s dst %s self permanent vni %d src_vni %d", h.mac, h.vtep, n.vni, n.vni))
			}
		}
	}
	mtu := 0
	ls := strings.Split(state, "\n")
	for i, l := range ls {
		f := strings.Fields(l)
		if len(f) < 5 || f[0] != "link" || suffix[f[1]] == "" {
			continue
		}
		ls[i] += suffix[f[1]]
		if m, _ := strconv.Atoi(f[4]); mtu == 0 || m < mtu {
			mtu = m
		}
	}
	if len(nets) > 0 {
		extra = append(extra, fmt.Sprintf("link skrb bridge mtu %d up alias skiff:replication vlan_filtering", mtu))
	}
	for _, n := range nets {
		extra = append(extra, fmt.Sprintf("link skrb.%d vlan mtu %d down alias skiff:suppress id %d on skrb", n.vid, mtu, n.vid))
	}
	return nltest.Expect(append(ls, extra...)...)
}
