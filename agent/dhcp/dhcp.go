// Package dhcp is the agent's DHCPv4 responder for VM ports: a guest asks
// for an address on its tap (or VF) and gets the one Skiff allocated to its
// port, with the gateway, MTU and DNS servers of its network. There is no
// DHCP server to run and no pool: every port has exactly one lease, known
// in advance from the node's plan.
//
// The responder listens only on the host-side interfaces of the node's VM
// ports (a packet socket per interface, which sees the guest's frames
// before a bridge or tc does) and answers only the port's own MAC, on
// that interface only: a frame from any other MAC, a relayed request, or
// a request for an address that is not the port's gets no offer (a
// request for another address gets a NAK).
//
//	r := dhcp.NewResponder(dhcp.Options{Logger: log, Registerer: reg})
//	r.Set([]dhcp.Port{{Endpoint: "vm1-0", Interface: "skp12ab34cd", Lease: dhcp.Lease{
//		MAC: mac, Addr: netip.MustParsePrefix("198.51.100.7/24"), Gateway: gw, ServerMAC: gwMAC, MTU: 1450}}})
//	defer r.Close()
//
// Answer is the protocol without sockets: the reply a request deserves,
// or nil.
package dhcp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// DefaultLeaseTime is how long a lease lasts when Lease.Time is zero. The
// address is the port's for its whole life, so a long lease costs nothing.
const DefaultLeaseTime = 24 * time.Hour

// Lease is what a port's guest gets.
type Lease struct {
	// MAC is the guest's: the only client answered.
	MAC net.HardwareAddr
	// Addr is the guest's address and its subnet's prefix length.
	Addr netip.Prefix
	// Gateway is the default router; invalid for none. It is also the
	// server identifier (the gateway answers on every node).
	Gateway netip.Addr
	// ServerMAC is the source MAC of answers (the gateway's).
	ServerMAC net.HardwareAddr
	MTU       int
	DNS       []netip.Addr
	Time      time.Duration
}

// serverID is the address the responder speaks as.
func (l Lease) serverID() netip.Addr {
	if l.Gateway.Is4() {
		return l.Gateway
	}
	// No gateway: the subnet's first address names the server; it is
	// only an identifier, nothing answers there.
	return l.Addr.Masked().Addr().Next()
}

// Validate checks that a lease can be served.
func (l Lease) Validate() error {
	switch {
	case len(l.MAC) != 6:
		return fmt.Errorf("dhcp: lease MAC %q is not an Ethernet address", l.MAC)
	case !l.Addr.Addr().Is4():
		return fmt.Errorf("dhcp: lease address %s is not IPv4", l.Addr)
	case l.Addr.Bits() < 1 || l.Addr.Bits() > 30:
		return fmt.Errorf("dhcp: lease prefix /%d leaves no room for a router", l.Addr.Bits())
	case l.Gateway.IsValid() && !l.Gateway.Is4():
		return fmt.Errorf("dhcp: gateway %s is not IPv4", l.Gateway)
	case len(l.ServerMAC) != 6:
		return fmt.Errorf("dhcp: server MAC %q is not an Ethernet address", l.ServerMAC)
	}
	return nil
}

// Reasons a request gets no answer (metrics label values).
const (
	IgnoreUnknownMAC = "unknown-mac"   // chaddr or source MAC is not the port's
	IgnoreRelayed    = "relayed"       // giaddr set: only direct clients are served
	IgnoreOtherSrv   = "other-server"  // a REQUEST for another server's offer
	IgnoreType       = "message-type"  // RELEASE, DECLINE, replies, unknown types
	IgnoreMalformed  = "malformed"     // not a DHCPv4 request over IPv4/UDP
	IgnoreNoLease    = "no-lease"      // the port has no IPv4 address
	IgnoreNotRequest = "not-a-request" // BOOTREPLY seen on the port
)

// Ignored is why Answer gives no reply.
type Ignored struct{ Reason string }

func (e *Ignored) Error() string { return "dhcp: ignored: " + e.Reason }

func ignored(reason string) error { return &Ignored{Reason: reason} }

// Answer returns the reply to req, a request that arrived on a port whose
// lease is l from source MAC src: an OFFER for a DISCOVER, an ACK for a
// REQUEST of the lease's address (a NAK for any other address), an ACK
// without address for an INFORM. It returns an *Ignored error when the
// request deserves no answer (above all: a MAC that is not the port's).
func Answer(req *dhcpv4.DHCPv4, src net.HardwareAddr, l Lease) (*dhcpv4.DHCPv4, error) {
	switch {
	case req.OpCode != dhcpv4.OpcodeBootRequest:
		return nil, ignored(IgnoreNotRequest)
	case req.HWType != iana.HWTypeEthernet || !bytes.Equal(req.ClientHWAddr, l.MAC) || !bytes.Equal(src, l.MAC):
		return nil, ignored(IgnoreUnknownMAC)
	case req.GatewayIPAddr != nil && !req.GatewayIPAddr.IsUnspecified():
		return nil, ignored(IgnoreRelayed)
	case !l.Addr.Addr().Is4():
		return nil, ignored(IgnoreNoLease)
	}
	server := net.IP(l.serverID().AsSlice())
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		return reply(req, l, dhcpv4.MessageTypeOffer, true)
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(server) {
			return nil, ignored(IgnoreOtherSrv)
		}
		want := req.RequestedIPAddress()
		if want == nil {
			want = req.ClientIPAddr // renewing or rebinding
		}
		if !want.Equal(net.IP(l.Addr.Addr().AsSlice())) {
			return dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)), dhcpv4.WithBroadcast(true),
				dhcpv4.WithOption(dhcpv4.OptMessage(fmt.Sprintf("%s is not this port's address", want))))
		}
		return reply(req, l, dhcpv4.MessageTypeAck, true)
	case dhcpv4.MessageTypeInform:
		return reply(req, l, dhcpv4.MessageTypeAck, false)
	}
	return nil, ignored(IgnoreType)
}

// reply builds an OFFER or ACK carrying the lease (withAddr) or only the
// network's parameters (INFORM).
func reply(req *dhcpv4.DHCPv4, l Lease, t dhcpv4.MessageType, withAddr bool) (*dhcpv4.DHCPv4, error) {
	server := net.IP(l.serverID().AsSlice())
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(t),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
		dhcpv4.WithNetmask(net.CIDRMask(l.Addr.Bits(), 32)),
	}
	if withAddr {
		lt := l.Time
		if lt <= 0 {
			lt = DefaultLeaseTime
		}
		mods = append(mods, dhcpv4.WithYourIP(net.IP(l.Addr.Addr().AsSlice())), dhcpv4.WithLeaseTime(uint32(lt/time.Second)),
			dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(lt/2)), dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(lt*7/8)))
	}
	if l.Gateway.Is4() {
		mods = append(mods, dhcpv4.WithRouter(net.IP(l.Gateway.AsSlice())))
	}
	var dns []net.IP
	for _, d := range l.DNS {
		if d.Is4() {
			dns = append(dns, net.IP(d.AsSlice()))
		}
	}
	if len(dns) > 0 {
		mods = append(mods, dhcpv4.WithDNS(dns...))
	}
	if l.MTU >= 68 && l.MTU <= 65535 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionInterfaceMTU, []byte{byte(l.MTU >> 8), byte(l.MTU)}))
	}
	bcast := l.Addr.Masked().Addr().As4()
	host := ^uint32(0) >> l.Addr.Bits()
	for i := range 4 {
		bcast[i] |= byte(host >> (24 - 8*i))
	}
	mods = append(mods, dhcpv4.WithOption(dhcpv4.OptBroadcastAddress(net.IP(bcast[:]))))
	return dhcpv4.NewReplyFromRequest(req, mods...)
}

// requestType names a message type for metrics ("" when not a request).
func requestType(t dhcpv4.MessageType) string {
	if slices.Contains([]dhcpv4.MessageType{dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeInform,
		dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeDecline}, t) {
		return t.String()
	}
	return "other"
}

// errNotDHCP marks frames that are not DHCPv4 requests.
var errNotDHCP = errors.New("dhcp: not a DHCPv4 request frame")
