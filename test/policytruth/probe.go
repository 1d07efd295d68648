package policytruth

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Serve opens the probe ports inside the pod until the test ends: TCP and
// SCTP listeners that accept and close, UDP sockets that echo. ICMP needs
// no server (the pod's kernel answers echoes). An SCTP probe fails it
// where the kernel has no SCTP.
func Serve(t testing.TB, p *Pod, probes []Probe) {
	t.Helper()
	err := ns.WithNetNSPath(p.NetNS, func(ns.NetNS) error {
		for _, pr := range probes {
			addr := net.JoinHostPort(p.IP, fmt.Sprint(pr.Port))
			switch pr.Proto {
			case "TCP":
				l, err := net.Listen("tcp", addr)
				if err != nil {
					return err
				}
				t.Cleanup(func() { l.Close() })
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
			case "UDP":
				u, err := net.ListenPacket("udp", addr)
				if err != nil {
					return err
				}
				t.Cleanup(func() { u.Close() })
				go func() {
					buf := make([]byte, 64)
					for {
						n, from, err := u.ReadFrom(buf)
						if err != nil {
							return
						}
						_, _ = u.WriteTo(buf[:n], from)
					}
				}()
			case "SCTP":
				l, err := ListenSCTP(p.IP, pr.Port)
				if err != nil {
					return err
				}
				t.Cleanup(func() { l.Close() })
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod %s: probe servers: %v", p.Name, err)
	}
}

// Measure probes every ordered pair of distinct pods on every probe,
// concurrently, each waiting at most timeout, and returns what passed
// (Key → passed).
func Measure(pods []*Pod, probes []Probe, timeout time.Duration) map[string]bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := map[string]bool{}
	for _, src := range pods {
		for _, dst := range pods {
			if src == dst {
				continue
			}
			for _, pr := range probes {
				wg.Go(func() {
					ok := Reach(src, dst, pr, timeout)
					mu.Lock()
					got[Key(src, dst, pr)] = ok
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	return got
}

// Reach reports whether one probe from src gets through to dst within
// timeout: a TCP connection or SCTP association established, a UDP
// datagram echoed, an ICMP echo answered.
func Reach(src, dst *Pod, pr Probe, timeout time.Duration) bool {
	ok := false
	_ = ns.WithNetNSPath(src.NetNS, func(ns.NetNS) error {
		switch pr.Proto {
		case "ICMP":
			ok = echo(dst.IP, timeout)
		case "TCP", "UDP":
			ok = dial(strings.ToLower(pr.Proto), net.JoinHostPort(dst.IP, fmt.Sprint(pr.Port)), timeout)
		case "SCTP":
			ok = DialSCTP(dst.IP, pr.Port, timeout) == nil
		}
		return nil
	})
	return ok
}

func dial(network, addr string, timeout time.Duration) bool {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return false
	}
	defer c.Close()
	if network == "tcp" {
		return true
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("probe")); err != nil {
		return false
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	return err == nil && string(buf[:n]) == "probe"
}

// echoID numbers ICMP echoes: every raw socket of a namespace sees every
// reply, so each probe knows its own by identifier and sequence.
var echoID = atomic.Uint32{}

func init() { echoID.Store(rand.Uint32()) }

// echo sends one ICMP (ICMPv6 for an IPv6 address) echo request to ip
// from the current namespace and waits for its reply.
func echo(ip string, timeout time.Duration) bool {
	dst := net.ParseIP(ip)
	if dst == nil {
		return false
	}
	network, local, request, reply := "ip4:icmp", "0.0.0.0", byte(8), byte(0)
	if dst.To4() == nil {
		// The kernel computes an ICMPv6 raw socket's checksum.
		network, local, request, reply = "ip6:ipv6-icmp", "::", 128, 129
	}
	c, err := net.ListenPacket(network, local)
	if err != nil {
		return false
	}
	defer c.Close()
	n := echoID.Add(1)
	id, seq := uint16(n), uint16(n>>16)
	payload := []byte("skiff policytruth")
	req := make([]byte, 8, 8+len(payload))
	req[0] = request
	binary.BigEndian.PutUint16(req[4:], id)
	binary.BigEndian.PutUint16(req[6:], seq)
	req = append(req, payload...)
	if request == 8 {
		binary.BigEndian.PutUint16(req[2:], checksum(req))
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.WriteTo(req, &net.IPAddr{IP: dst}); err != nil {
		return false
	}
	buf := make([]byte, 1500)
	for {
		k, from, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		m := buf[:k]
		a, _ := from.(*net.IPAddr)
		if a != nil && a.IP.Equal(dst) && len(m) >= 8 && m[0] == reply && m[1] == 0 &&
			binary.BigEndian.Uint16(m[4:]) == id && binary.BigEndian.Uint16(m[6:]) == seq && bytes.Equal(m[8:], payload) {
			return true
		}
	}
}

// checksum is the Internet checksum (RFC 1071) of b.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
