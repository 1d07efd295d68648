package dhcp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	guestMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x07}
	otherMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x08}
	gwMAC    = net.HardwareAddr{0x02, 0x73, 0x6b, 0x00, 0x00, 0x64}
)

func testLease() Lease {
	return Lease{MAC: guestMAC, Addr: netip.MustParsePrefix("198.51.100.7/24"), Gateway: netip.MustParseAddr("198.51.100.1"),
		ServerMAC: gwMAC, MTU: 1450, DNS: []netip.Addr{netip.MustParseAddr("198.51.100.53"), netip.MustParseAddr("2001:db8::53")}}
}

func request(t *testing.T, mac net.HardwareAddr, typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(typ)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAnswer(t *testing.T) {
	l := testLease()
	server := net.ParseIP("198.51.100.1").To4()
	mine := net.ParseIP("198.51.100.7").To4()
	cases := []struct {
		name   string
		req    *dhcpv4.DHCPv4
		src    net.HardwareAddr
		want   dhcpv4.MessageType // 0: ignored
		reason string
	}{
		{"discover", request(t, guestMAC, dhcpv4.MessageTypeDiscover), guestMAC, dhcpv4.MessageTypeOffer, ""},
		{"request selecting", request(t, guestMAC, dhcpv4.MessageTypeRequest, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(mine)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server))), guestMAC, dhcpv4.MessageTypeAck, ""},
		{"request renewing", request(t, guestMAC, dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(mine)), guestMAC, dhcpv4.MessageTypeAck, ""},
		{"request of another address", request(t, guestMAC, dhcpv4.MessageTypeRequest,
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("198.51.100.9")))), guestMAC, dhcpv4.MessageTypeNak, ""},
		{"request for another server", request(t, guestMAC, dhcpv4.MessageTypeRequest, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(mine)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("203.0.113.1")))), guestMAC, 0, IgnoreOtherSrv},
		{"inform", request(t, guestMAC, dhcpv4.MessageTypeInform, dhcpv4.WithClientIP(mine)), guestMAC, dhcpv4.MessageTypeAck, ""},
		{"unknown MAC", request(t, otherMAC, dhcpv4.MessageTypeDiscover), otherMAC, 0, IgnoreUnknownMAC},
		{"port MAC in chaddr, sent from another", request(t, guestMAC, dhcpv4.MessageTypeDiscover), otherMAC, 0, IgnoreUnknownMAC},
		{"relayed", request(t, guestMAC, dhcpv4.MessageTypeDiscover, dhcpv4.WithGatewayIP(net.ParseIP("203.0.113.1"))), guestMAC, 0, IgnoreRelayed},
		{"release", request(t, guestMAC, dhcpv4.MessageTypeRelease, dhcpv4.WithClientIP(mine)), guestMAC, 0, IgnoreType},
	}
	for _, c := range cases {
		resp, err := Answer(c.req, c.src, l)
		if c.want == 0 {
			var ig *Ignored
			if resp != nil || !errors.As(err, &ig) || ig.Reason != c.reason {
				t.Errorf("%s: got %v %v, want ignored (%s)", c.name, resp, err, c.reason)
			}
			continue
		}
		if err != nil || resp.MessageType() != c.want {
			t.Errorf("%s: got %v %v, want %s", c.name, resp, err, c.want)
			continue
		}
		if resp.TransactionID != c.req.TransactionID || !bytes.Equal(resp.ClientHWAddr, guestMAC) || !resp.ServerIdentifier().Equal(server) {
			t.Errorf("%s: reply does not match the request: %s", c.name, resp.Summary())
		}
		if c.want == dhcpv4.MessageTypeNak {
			continue
		}
		if got := resp.SubnetMask(); net.IP(got).String() != "255.255.255.0" {
			t.Errorf("%s: mask %v", c.name, got)
		}
		if r := resp.Router(); len(r) != 1 || !r[0].Equal(server) {
			t.Errorf("%s: router %v", c.name, r)
		}
		if d := resp.DNS(); len(d) != 1 || d[0].String() != "198.51.100.53" {
			t.Errorf("%s: DNS %v (IPv6 servers are not IPv4 options)", c.name, d)
		}
		if mtu := resp.Options.Get(dhcpv4.OptionInterfaceMTU); !bytes.Equal(mtu, []byte{0x05, 0xaa}) {
			t.Errorf("%s: MTU option %x", c.name, mtu)
		}
		if b := resp.BroadcastAddress(); b.String() != "198.51.100.255" {
			t.Errorf("%s: broadcast %v", c.name, b)
		}
		if c.req.MessageType() == dhcpv4.MessageTypeInform {
			if resp.YourIPAddr != nil && !resp.YourIPAddr.IsUnspecified() || resp.IPAddressLeaseTime(0) != 0 {
				t.Errorf("inform: ACK carries an address or lease: %s", resp.Summary())
			}
			continue
		}
		if !resp.YourIPAddr.Equal(mine) || resp.IPAddressLeaseTime(0) != DefaultLeaseTime {
			t.Errorf("%s: yiaddr %v lease %v", c.name, resp.YourIPAddr, resp.IPAddressLeaseTime(0))
		}
	}
	// No IPv4 address (an L2-only network): nothing to offer.
	l2 := testLease()
	l2.Addr = netip.Prefix{}
	if resp, err := Answer(request(t, guestMAC, dhcpv4.MessageTypeDiscover), guestMAC, l2); resp != nil || err == nil {
		t.Errorf("L2-only port answered: %v", resp)
	}
	// A lease time given is used; renew and rebind follow from it.
	l.Time = time.Hour
	resp, _ := Answer(request(t, guestMAC, dhcpv4.MessageTypeDiscover), guestMAC, l)
	if resp.IPAddressLeaseTime(0) != time.Hour || resp.IPAddressRenewalTime(0) != 30*time.Minute {
		t.Errorf("lease %v renew %v", resp.IPAddressLeaseTime(0), resp.IPAddressRenewalTime(0))
	}
}

func TestFrames(t *testing.T) {
	l := testLease()
	req := request(t, guestMAC, dhcpv4.MessageTypeDiscover)
	f := BuildRequest(req)
	src, got, err := ParseFrame(f)
	if err != nil || !bytes.Equal(src, guestMAC) || got.TransactionID != req.TransactionID || got.MessageType() != dhcpv4.MessageTypeDiscover {
		t.Fatalf("parse of a built request: %v %v %v", src, got, err)
	}
	// Checksums: IPv4 header and UDP (with its pseudo-header) sum to 0.
	if c := checksum(f[14:34], 0); c != 0 {
		t.Errorf("IPv4 header checksum does not verify: %#x", c)
	}
	resp, _ := Answer(got, src, l)
	out := BuildReply(resp, got, l.ServerMAC, l.serverID())
	if !bytes.Equal(out[0:6], guestMAC) || !bytes.Equal(out[6:12], gwMAC) {
		t.Errorf("reply MACs %x -> %x", out[6:12], out[0:6])
	}
	if dst := net.IP(out[30:34]); dst.String() != "198.51.100.7" || net.IP(out[26:30]).String() != "198.51.100.1" {
		t.Errorf("reply addresses %v -> %v", net.IP(out[26:30]), dst)
	}
	pseudo := append(append(append([]byte{}, out[26:34]...), 0, 17), out[38:40]...)
	if c := checksum(append(pseudo, out[34:]...), 0); c != 0 {
		t.Errorf("UDP checksum does not verify: %#x", c)
	}
	// A client asking for broadcast gets it; so does a NAK.
	bc := request(t, guestMAC, dhcpv4.MessageTypeDiscover, dhcpv4.WithBroadcast(true))
	resp, _ = Answer(bc, guestMAC, l)
	if out := BuildReply(resp, bc, gwMAC, l.serverID()); net.IP(out[30:34]).String() != "255.255.255.255" || !bytes.Equal(out[0:6], broadcastMAC) {
		t.Errorf("broadcast reply to %v at %x", net.IP(out[30:34]), out[0:6])
	}
	// Not DHCP: too short, not IPv4, not to port 67, fragments.
	for name, mut := range map[string]func([]byte) []byte{
		"short":      func(b []byte) []byte { return b[:30] },
		"arp":        func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b },
		"port 68":    func(b []byte) []byte { b[36], b[37] = 0, 68; return b },
		"fragment":   func(b []byte) []byte { b[20] |= 0x20; return b },
		"tcp":        func(b []byte) []byte { b[23] = 6; return b },
		"truncated":  func(b []byte) []byte { return b[:len(b)-100] },
		"bad header": func(b []byte) []byte { b[14] = 0x42; return b },
	} {
		if _, _, err := ParseFrame(mut(bytes.Clone(f))); !errors.Is(err, errNotDHCP) {
			t.Errorf("%s: parsed: %v", name, err)
		}
	}
}

func TestRequestFilterAssembles(t *testing.T) {
	f, err := requestFilter()
	if err != nil || len(f) != 13 {
		t.Fatalf("filter: %d instructions, %v", len(f), err)
	}
}
