package testkit

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// pair makes two namespaces joined by a veth: a at 192.0.2.1, b at
// 192.0.2.2 (and 2001:db8::1, ::2).
func pair(t *testing.T) (a, b string) {
	a, b = New(t), New(t)
	Run(t, a, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b)
	for i, ns := range []string{a, b} {
		n := strconv.Itoa(i + 1)
		Run(t, ns, "ip", "addr", "add", "192.0.2."+n+"/24", "dev", "eth0")
		Run(t, ns, "ip", "addr", "add", "2001:db8::"+n+"/64", "dev", "eth0", "nodad")
		Run(t, ns, "ip", "link", "set", "eth0", "up")
	}
	return a, b
}

// TestProbes: ping and the TCP probes between two namespaces, and what
// they say when nothing answers.
func TestProbes(t *testing.T) {
	a, b := pair(t)
	MustPing(t, a, "192.0.2.2", 1, 2*time.Second)
	MustPing(t, a, "2001:db8::2", 1, 2*time.Second)
	if err := Ping(a, "192.0.2.3", 1, time.Second); err == nil || !strings.Contains(err.Error(), "ping "+a+" -> 192.0.2.3") {
		t.Fatalf("ping to nobody: %v", err)
	}

	Serve(t, b, ":8080", "b")
	if server, seen, err := Ask(a, "192.0.2.2:8080", 3*time.Second); err != nil || server != "b" || seen != "192.0.2.1" {
		t.Fatalf("ask: %q %q %v", server, seen, err)
	}
	if !Connects(a, "[2001:db8::2]:8080", time.Second) {
		t.Fatal("no connection over IPv6")
	}
	if Connects(a, "192.0.2.2:8081", time.Second) {
		t.Fatal("a connection to a port nobody serves")
	}
	if seen, err := SourceSeen(b, a, "192.0.2.1"); err != nil || seen != "192.0.2.2" {
		t.Fatalf("source seen: %q %v", seen, err)
	}
}
