package dhcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// DHCP's UDP ports.
const (
	ServerPort = 67
	ClientPort = 68
)

const (
	ethHeader  = 14
	ipv4Header = 20
	udpHeader  = 8
	etherIPv4  = 0x0800
	protoUDP   = 17
)

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ParseFrame decodes an Ethernet frame carrying a DHCPv4 message to the
// server port over IPv4/UDP, and returns the frame's source MAC and the
// message.
func ParseFrame(f []byte) (net.HardwareAddr, *dhcpv4.DHCPv4, error) {
	if len(f) < ethHeader+ipv4Header+udpHeader || binary.BigEndian.Uint16(f[12:14]) != etherIPv4 {
		return nil, nil, errNotDHCP
	}
	ip := f[ethHeader:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	switch {
	case ip[0]>>4 != 4 || ihl < ipv4Header || total < ihl+udpHeader || total > len(ip):
		return nil, nil, fmt.Errorf("%w: bad IPv4 header", errNotDHCP)
	case ip[9] != protoUDP || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0:
		return nil, nil, fmt.Errorf("%w: not an unfragmented UDP packet", errNotDHCP)
	}
	udp := ip[ihl:total]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if binary.BigEndian.Uint16(udp[2:4]) != ServerPort || ulen < udpHeader || ulen > len(udp) {
		return nil, nil, fmt.Errorf("%w: not UDP to port %d", errNotDHCP, ServerPort)
	}
	m, err := dhcpv4.FromBytes(udp[udpHeader:ulen])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errNotDHCP, err)
	}
	return net.HardwareAddr(f[6:12]), m, nil
}

// BuildReply frames a reply for the client that sent req (RFC 2131
// 4.1): to the client's address when it has one (renewing), broadcast
// when it asked for broadcast or for a NAK, else to the offered address
// at the client's MAC. The source is the server identifier at srcMAC.
func BuildReply(resp, req *dhcpv4.DHCPv4, srcMAC net.HardwareAddr, src netip.Addr) []byte {
	dstMAC, dst := req.ClientHWAddr, netip.IPv4Unspecified()
	ciaddr, _ := netip.AddrFromSlice(req.ClientIPAddr.To4())
	yiaddr, _ := netip.AddrFromSlice(resp.YourIPAddr.To4())
	switch {
	case resp.MessageType() == dhcpv4.MessageTypeNak || req.IsBroadcast():
		dstMAC, dst = broadcastMAC, netip.AddrFrom4([4]byte{255, 255, 255, 255})
	case ciaddr.IsValid() && !ciaddr.IsUnspecified():
		dst = ciaddr
	default:
		dst = yiaddr
	}
	return buildFrame(dstMAC, srcMAC, src, dst, ServerPort, ClientPort, resp.ToBytes())
}

// BuildRequest frames a client's message as a guest sends it (broadcast
// from 0.0.0.0); tests use it.
func BuildRequest(m *dhcpv4.DHCPv4) []byte {
	return buildFrame(broadcastMAC, m.ClientHWAddr, netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255}),
		ClientPort, ServerPort, m.ToBytes())
}

func buildFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	f := make([]byte, ethHeader+ipv4Header+udpHeader+len(payload))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:14], etherIPv4)
	ip := f[ethHeader:]
	ip[0] = 0x45
	ip[1] = 0x10 // low delay, as DHCP servers send
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4Header+udpHeader+len(payload)))
	ip[8] = 64
	ip[9] = protoUDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:12], checksum(ip[:ipv4Header], 0))
	udp := ip[ipv4Header:]
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint16(udp[2:4], dport)
	binary.BigEndian.PutUint16(udp[4:6], uint16(udpHeader+len(payload)))
	copy(udp[udpHeader:], payload)
	// The pseudo-header: addresses, protocol, UDP length.
	pseudo := uint32(protoUDP) + uint32(udpHeader+len(payload))
	for i := 0; i < 4; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(s[i:])) + uint32(binary.BigEndian.Uint16(d[i:]))
	}
	sum := checksum(udp, pseudo)
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(udp[6:8], sum)
	return f
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
