package dpu

import (
	"fmt"
	"strings"

	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

// What the offload-wrapping table wants of the rules: the host's
// endpoints on their adopted representors (HV0, HV1) reach the gateway
// 198.51.100.1 (its MAC on skh100), each other and r (198.51.100.5,
// :01) behind 192.0.2.2; the gateway port and the VXLAN device deliver
// to them. Their broadcast and multicast go through the replication
// bridge (replicated), flooding to each other and to 192.0.2.2.

// bridgePort is how State prints a port of the replication bridge.
const bridgePort = " master skrb learning off neigh_suppress off hairpin off flood off"

// dpuGateway are blue's gateway pair and the VXLAN device, offloaded,
// the gateway's port and the VXLAN device on the replication bridge.
var dpuGateway = `link skg100 veth mtu 1450 up mac 02:73:6b:00:00:64 alias skiff:gateway:blue peer skh100
link skh100 veth mtu 1450 up alias skiff:gateway-port:blue peer skg100` + bridgePort + ` isolated on
link skvx vxlan mtu 1450 up alias skiff:vxlan:external external dstport 4789 hw-tc` +
	strings.Replace(bridgePort, "neigh_suppress off", "neigh_suppress on", 1) + ` isolated on vlan_tunnel on
addr skg100 198.51.100.1/24
qdisc skh100 clsact
qdisc skvx clsact`

// filter is a filter line of Skiff's at "CHAIN PRIO PROTOCOL HANDLE": in
// hardware alone but on the gateway port (a veth), the policy
// programmer's cookie in chain 0, the forwarding programmer's in chain
// 3.
func filter(dev, at, match string, actions ...string) string {
	flags, cookie := "skip_sw in_hw", "736b5001…"
	if dev == "skh100" {
		flags = "not_in_hw"
	}
	if strings.HasPrefix(at, "3 ") {
		cookie = "736b0000…"
	}
	return nltest.Filter(dev, at, flags, match, cookie, actions...)
}

const (
	toGW     = "mirred egress redirect dev skh100"
	toVX     = "mirred egress redirect dev skvx"
	encap    = "tunnel_key set id 100 src_ip 192.0.2.11 dst_ip 192.0.2.2 dst_port 4789"
	decap    = "enc_key_id 100 enc_dst_ip 192.0.2.11 enc_dst_port 4789"
	flood    = "dst_mac ff:ff:ff:ff:ff:ff"
	entry    = "0 21266 all 0x1"
	unset    = "tunnel_key unset"
	toR      = "dst_mac 02:00:00:00:00:01"
	toGWMAC  = "dst_mac 02:73:6b:00:00:64"
	arpGW    = "arp_op request arp_tip 198.51.100.1"
	arpR     = "arp_op request arp_tip 198.51.100.5"
	arpFor   = "arp_op request arp_tip %s"
	redirect = "mirred egress redirect dev %s"
	mirror   = "mirred egress mirror dev %s"
)

func to(dev string) string { return fmt.Sprintf(redirect, dev) }

// replicated is the replication bridge of blue (VLAN 1, VNI 100,
// flooding to 192.0.2.2) with the adopted representors hosts (HV0, HV1)
// and the gateway's port as its access ports, and its neighbour
// suppression: r's and the hosts' endpoints (v0: .10, :10; v1: .11,
// :11) in the VLAN device skrb.1 and the bridge.
func replicated(hosts ...string) string {
	ls := []string{"link skrb bridge mtu 1450 up alias skiff:replication vlan_filtering", "vlan skh100 1 access", "vlan skvx 1 tunnel 100",
		"fdb skvx 00:00:00:00:00:00 dst 192.0.2.2 self permanent vni 100 src_vni 100",
		"link skrb.1 vlan mtu 1450 down alias skiff:suppress id 1 on skrb",
		"fdb skvx 02:00:00:00:00:01 master static vlan 1", "fdb skvx 02:00:00:00:00:01 dst 192.0.2.2 self permanent vni 100 src_vni 100",
		"neigh skrb.1 198.51.100.5 lladdr 02:00:00:00:00:01", "fdb skh100 02:73:6b:00:00:64 master static vlan 1",
		"neigh skrb.1 198.51.100.1 lladdr 02:73:6b:00:00:64"}
	for _, h := range hosts {
		n := strings.TrimPrefix(h, "HV")
		ls = append(ls, "vlan "+h+" 1 access", "fdb "+h+" 02:00:00:00:00:1"+n+" master static vlan 1",
			"neigh skrb.1 198.51.100.1"+n+" lladdr 02:00:00:00:00:1"+n)
	}
	return lines(ls...)
}

var (
	// v0 alone.
	rulesV0 = lines(
		"qdisc HV0 clsact",
		filter("HV0", entry, "", "gact goto chain 3"),
		filter("HV0", "3 21248 arp 0x1", arpGW, toGW),
		filter("HV0", "3 21249 all 0x2", toR, encap, toVX),
		filter("HV0", "3 21249 all 0x3", toGWMAC, toGW),
		filter("skh100", entry, "", "gact goto chain 3"),
		filter("skh100", "3 21248 arp 0x2", fmt.Sprintf(arpFor, "198.51.100.10"), to("HV0")),
		filter("skh100", "3 21249 all 0x3", "dst_mac 02:00:00:00:00:10", to("HV0")),
		filter("skvx", entry, "", "gact goto chain 3"),
		filter("skvx", "3 21248 arp 0x2", decap+" "+fmt.Sprintf(arpFor, "198.51.100.10"), unset, to("HV0")),
		filter("skvx", "3 21249 all 0x3", "dst_mac 02:00:00:00:00:10 "+decap, unset, to("HV0")))
	// v0 and v1: v1's rules, and v0's toward v1 added.
	rulesBoth = lines(
		"qdisc HV0 clsact",
		filter("HV0", entry, "", "gact goto chain 3"),
		filter("HV0", "3 21248 arp 0x1", arpGW, toGW),
		filter("HV0", "3 21248 arp 0x4", fmt.Sprintf(arpFor, "198.51.100.11"), to("HV1")),
		filter("HV0", "3 21249 all 0x2", toR, encap, toVX),
		filter("HV0", "3 21249 all 0x3", toGWMAC, toGW),
		filter("HV0", "3 21249 all 0x5", "dst_mac 02:00:00:00:00:11", to("HV1")),
		"qdisc HV1 clsact",
		filter("HV1", entry, "", "gact goto chain 3"),
		filter("HV1", "3 21248 arp 0x1", arpGW, toGW),
		filter("HV1", "3 21248 arp 0x2", fmt.Sprintf(arpFor, "198.51.100.10"), to("HV0")),
		filter("HV1", "3 21249 all 0x3", toR, encap, toVX),
		filter("HV1", "3 21249 all 0x4", "dst_mac 02:00:00:00:00:10", to("HV0")),
		filter("HV1", "3 21249 all 0x5", toGWMAC, toGW),
		filter("skh100", entry, "", "gact goto chain 3"),
		filter("skh100", "3 21248 arp 0x2", fmt.Sprintf(arpFor, "198.51.100.10"), to("HV0")),
		filter("skh100", "3 21248 arp 0x4", fmt.Sprintf(arpFor, "198.51.100.11"), to("HV1")),
		filter("skh100", "3 21249 all 0x3", "dst_mac 02:00:00:00:00:10", to("HV0")),
		filter("skh100", "3 21249 all 0x5", "dst_mac 02:00:00:00:00:11", to("HV1")),
		filter("skvx", entry, "", "gact goto chain 3"),
		filter("skvx", "3 21248 arp 0x2", decap+" "+fmt.Sprintf(arpFor, "198.51.100.10"), unset, to("HV0")),
		filter("skvx", "3 21248 arp 0x4", decap+" "+fmt.Sprintf(arpFor, "198.51.100.11"), unset, to("HV1")),
		filter("skvx", "3 21249 all 0x3", "dst_mac 02:00:00:00:00:10 "+decap, unset, to("HV0")),
		filter("skvx", "3 21249 all 0x5", "dst_mac 02:00:00:00:00:11 "+decap, unset, to("HV1")))
	// v1 alone once v0 left: v1's rules toward v0 gone.
	rulesV1 = lines(
		"qdisc HV1 clsact",
		filter("HV1", entry, "", "gact goto chain 3"),
		filter("HV1", "3 21248 arp 0x1", arpGW, toGW),
		filter("HV1", "3 21249 all 0x3", toR, encap, toVX),
		filter("HV1", "3 21249 all 0x5", toGWMAC, toGW),
		filter("skh100", entry, "", "gact goto chain 3"),
		filter("skh100", "3 21248 arp 0x4", fmt.Sprintf(arpFor, "198.51.100.11"), to("HV1")),
		filter("skh100", "3 21249 all 0x5", "dst_mac 02:00:00:00:00:11", to("HV1")),
		filter("skvx", entry, "", "gact goto chain 3"),
		filter("skvx", "3 21248 arp 0x4", decap+" "+fmt.Sprintf(arpFor, "198.51.100.11"), unset, to("HV1")),
		filter("skvx", "3 21249 all 0x5", "dst_mac 02:00:00:00:00:11 "+decap, unset, to("HV1")))
)

func lines(ls ...string) string { return strings.Join(ls, "\n") }
