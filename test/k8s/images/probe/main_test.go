package main

import (
	"net"
	"testing"
	"time"
)

// echoServers starts TCP and UDP echo servers on loopback.
func echoServers(t *testing.T) (tcp, udp string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); c.Close() })
	go echoTCP(l)
	go echoUDP(c)
	return l.Addr().String(), c.LocalAddr().String()
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T, proto string) string {
	t.Helper()
	if proto == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := l.Addr().String()
		l.Close()
		return a
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := c.LocalAddr().String()
	c.Close()
	return a
}

func TestProbeOnce(t *testing.T) {
	tcp, udp := echoServers(t)
	for _, tc := range []struct {
		proto, addr string
		ok          bool
	}{
		{"tcp", tcp, true},
		{"udp", udp, true},
		{"tcp", closedPort(t, "tcp"), false},
		{"udp", closedPort(t, "udp"), false},
	} {
		err := probeOnce(tc.proto, tc.addr, 500*time.Millisecond)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: %v, want ok=%v", tc.proto, tc.addr, err, tc.ok)
		}
	}
}

func TestFlow(t *testing.T) {
	tcp, udp := echoServers(t)
	for _, tc := range []struct {
		proto, addr string
		answered    bool
	}{
		{"tcp", tcp, true},
		{"udp", udp, true},
		{"tcp", closedPort(t, "tcp"), false},
		{"udp", closedPort(t, "udp"), false},
	} {
		r := runFlow(tc.proto, tc.addr, 10*time.Millisecond, 300*time.Millisecond)
		switch {
		case tc.answered && (r.sent < 10 || r.received != r.sent || r.errors != 0):
			t.Errorf("%s to an echo server: %v, want every message echoed", tc.proto, r)
		case !tc.answered && r.received != 0:
			t.Errorf("%s to a closed port: %v, want nothing received", tc.proto, r)
		case !tc.answered && tc.proto == "tcp" && r.errors == 0:
			t.Errorf("tcp to a closed port: %v, want errors counted", r)
		case !tc.answered && tc.proto == "udp" && r.sent-r.received < 10:
			t.Errorf("udp to a closed port: %v, want the messages counted lost", r)
		}
	}
}
