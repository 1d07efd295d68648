package dhcp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// rig is a node namespace with a bridge and guests: each guest is a
// namespace whose eth0 is a veth to the node's portN on the bridge, as a
// VM's tap would be.
type rig struct {
	t    *testing.T
	node string
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, node: testkit.New(t)}
	testkit.Run(t, r.node, "ip", "link", "add", "br0", "type", "bridge")
	testkit.Run(t, r.node, "ip", "link", "set", "br0", "up")
	return r
}

// guest makes guest namespace with eth0 (MAC mac) wired to port on br0.
func (r *rig) guest(port string, mac net.HardwareAddr) string {
	g := testkit.New(r.t)
	testkit.Run(r.t, r.node, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", g)
	testkit.Run(r.t, r.node, "ip", "link", "set", port, "master", "br0", "up")
	testkit.Run(r.t, g, "ip", "link", "set", "eth0", "address", mac.String(), "up")
	return g
}

func (r *rig) responder() *Responder {
	path := testkit.Path(r.node)
	res := NewResponder(Options{
		Listen: func(ifname string) (c Conn, idx int, err error) {
			err = nl.InNetNS(path, func() error { c, idx, err = Listen(ifname); return err })
			return c, idx, err
		},
		Index: func(ifname string) (idx int, err error) {
			err = nl.InNetNS(path, func() error {
				ifi, err := net.InterfaceByName(ifname)
				if err == nil {
					idx = ifi.Index
				}
				return err
			})
			return idx, err
		},
	})
	r.t.Cleanup(res.Close)
	return res
}

// ask runs a DHCP exchange (DISCOVER, REQUEST) from a guest's eth0 and
// returns the ACK, or nil when nobody answered.
func ask(t *testing.T, guest string) *dhcpv4.DHCPv4 {
	t.Helper()
	var c *nclient4.Client
	err := nl.InNetNS(testkit.Path(guest), func() (err error) {
		c, err = nclient4.New("eth0", nclient4.WithTimeout(400*time.Millisecond), nclient4.WithRetry(2))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Request(context.Background())
	if err != nil {
		return nil
	}
	return lease.ACK
}

// TestResponderServesOnlyItsPortsAndMACs runs the responder on a bridge
// port, as on a node, against a real DHCP client in a guest namespace.
func TestResponderServesOnlyItsPortsAndMACs(t *testing.T) {
	r := newRig(t)
	g1 := r.guest("port0", guestMAC)
	g2 := r.guest("port1", otherMAC)
	res := r.responder()
	l := testLease()
	if err := res.Set([]Port{{Endpoint: "vm1-0", Interface: "port0", Lease: l}}); err != nil {
		t.Fatal(err)
	}
	ack := ask(t, g1)
	if ack == nil {
		t.Fatal("the port's guest got no lease")
	}
	if !ack.YourIPAddr.Equal(net.ParseIP("198.51.100.7")) || ack.Router()[0].String() != "198.51.100.1" ||
		ack.DNS()[0].String() != "198.51.100.53" || !bytes.Equal(ack.Options.Get(dhcpv4.OptionInterfaceMTU), []byte{0x05, 0xaa}) {
		t.Fatalf("lease: %s", ack.Summary())
	}
	// A guest on a port the responder does not serve: its broadcast
	// reaches port0 through the bridge, outbound, and is not answered.
	if ack := ask(t, g2); ack != nil {
		t.Fatalf("a guest on an unserved port got %s", ack.Summary())
	}
	// A MAC that is not the port's, on the served port.
	testkit.Run(t, g1, "ip", "link", "set", "eth0", "address", otherMAC.String())
	if ack := ask(t, g1); ack != nil {
		t.Fatalf("an unknown MAC got %s", ack.Summary())
	}
	if n := testutil.ToFloat64(res.ignored.WithLabelValues(IgnoreUnknownMAC)); n == 0 {
		t.Error("unknown MACs not counted")
	}
	testkit.Run(t, g1, "ip", "link", "set", "eth0", "address", guestMAC.String())

	// The port's link made again (a new index): Set listens again.
	testkit.Run(t, r.node, "ip", "link", "del", "port0")
	g1 = r.guest("port0", guestMAC)
	if err := res.Set([]Port{{Endpoint: "vm1-0", Interface: "port0", Lease: l}}); err != nil {
		t.Fatal(err)
	}
	if ack := ask(t, g1); ack == nil {
		t.Fatal("no lease after the port's link came back")
	}
	// A port without an address (L2-only network) is not served, nor is
	// one that is gone.
	l2 := l
	l2.Addr = netip.Prefix{}
	if err := res.Set([]Port{{Endpoint: "vm1-0", Interface: "port0", Lease: l2}}); err != nil {
		t.Fatal(err)
	}
	if ack := ask(t, g1); ack != nil {
		t.Fatalf("an L2-only port got %s", ack.Summary())
	}
	if err := res.Set(nil); err != nil {
		t.Fatal(err)
	}
	if ack := ask(t, g1); ack != nil {
		t.Fatalf("a port no longer served got %s", ack.Summary())
	}
	if n := testutil.ToFloat64(res.replies.WithLabelValues("ACK")); n != 2 {
		t.Errorf("%v ACKs counted, want 2", n)
	}
	// An interface that does not exist is an error, tried again later.
	if err := res.Set([]Port{{Endpoint: "x", Interface: "nosuch0", Lease: l}}); err == nil {
		t.Error("listening on a missing interface succeeded")
	}
}

// BenchmarkAnswer is the responder's own work per request (parse, answer,
// frame), without sockets.
func BenchmarkAnswer(b *testing.B) {
	l := testLease()
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(guestMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))
	f := BuildRequest(m)
	for b.Loop() {
		src, req, err := ParseFrame(f)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := Answer(req, src, l)
		if err != nil {
			b.Fatal(err)
		}
		_ = BuildReply(resp, req, l.ServerMAC, l.serverID())
	}
}
