package offloadvm

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func family(v6 bool) string {
	if v6 {
		return "-6"
	}
	return "-4"
}

func mustJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// arpProbe is an ARP request from mac asking for target with sender
// address 0.0.0.0 (RFC 5227's probe): no neighbour table learns from it.
func arpProbe(mac string, target netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	hw, _ := net.ParseMAC(mac)
	b = append(b, hw...)
	b = append(b, 0, 0, 0, 0)
	b = append(b, make([]byte, 6)...)
	return append(b, target.AsSlice()...)
}

// dhcpDiscover is a DHCP discover from mac with transaction xid: IPv4
// from 0.0.0.0 to 255.255.255.255, UDP 68 to 67 (no UDP checksum).
func dhcpDiscover(mac string, xid uint32) []byte {
	bootp := make([]byte, 240)
	bootp[0], bootp[1], bootp[2] = 1, 1, 6 // request, Ethernet, 6-byte addresses
	binary.BigEndian.PutUint32(bootp[4:], xid)
	binary.BigEndian.PutUint16(bootp[10:], 0x8000) // broadcast reply
	hw, _ := net.ParseMAC(mac)
	copy(bootp[28:], hw)
	copy(bootp[236:], []byte{99, 130, 83, 99})
	bootp = append(bootp, 53, 1, 1, 255) // message type discover, end
	udp := make([]byte, 8, 8+len(bootp))
	binary.BigEndian.PutUint16(udp[0:], 68)
	binary.BigEndian.PutUint16(udp[2:], 67)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(bootp)))
	udp = append(udp, bootp...)
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	return append(ip, udp...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// allNodesUDP is an IPv6 packet from src to ff02::1 (hop limit 1)
// carrying payload in UDP to port 9 (no checksum: the receivers' stacks
// drop it, their packet sockets count it).
func allNodesUDP(src netip.Addr, payload []byte) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 9)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(udp)))
	h[6], h[7] = 17, 1
	copy(h[8:], src.AsSlice())
	dst := netip.MustParseAddr("ff02::1").As16()
	copy(h[24:], dst[:])
	return append(h, udp...)
}

// reportFilters logs the flower filters of node namespace ns: on the
// representor of one local endpoint (rep), the most on any device, and
// in all.
func reportFilters(t *testing.T, ns, rep string) {
	t.Helper()
	per := map[string]int{}
	all := filterHandles(t, ns)
	for _, f := range all {
		per[f[:strings.IndexByte(f, '/')]]++
	}
	most := ""
	for _, d := range slices.Sorted(maps.Keys(per)) {
		if most == "" || per[d] > per[most] {
			most = d
		}
	}
	t.Logf("FIGURE fleet filters in %s: %d in all, %d on %s, the most on one device %d (%s)", ns, len(all), per[rep], rep, per[most], most)
}

// tcFilter is what encapDsts and repOf read of a filter (tc -j).
type tcFilter struct {
	Options struct {
		Keys struct {
			DstMAC string `json:"dst_mac"`
		} `json:"keys"`
		Actions []struct {
			Kind  string `json:"kind"`
			ToDev string `json:"to_dev"`
		} `json:"actions"`
	} `json:"options"`
}

// ingressFilters reads the filters of dev's ingress in namespace ns.
func ingressFilters(t *testing.T, ns, dev string) []tcFilter {
	t.Helper()
	var fs []tcFilter
	raw := in(t, ns, tcBin, "-j", "filter", "show", "dev", dev, "ingress")
	if err := json.Unmarshal([]byte(raw), &fs); err != nil {
		t.Fatalf("tc filters of %s: %v\n%s", dev, err, raw)
	}
	return fs
}

// encapDsts lists the destination MACs of the encap filters (a
// tunnel_key action) on dev's ingress in namespace ns, sorted.
func encapDsts(t *testing.T, ns, dev string) []string {
	t.Helper()
	var out []string
	for _, f := range ingressFilters(t, ns, dev) {
		for _, a := range f.Options.Actions {
			if a.Kind == "tunnel_key" {
				out = append(out, f.Options.Keys.DstMAC)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// repOf is the representor a stand-in veth's filter redirects its
// traffic into (the device its mirred action names).
func repOf(t *testing.T, ns, standIn string) string {
	t.Helper()
	for _, f := range ingressFilters(t, ns, standIn) {
		for _, a := range f.Options.Actions {
			if a.ToDev != "" {
				return a.ToDev
			}
		}
	}
	t.Fatalf("%s redirects to no device", standIn)
	return ""
}
