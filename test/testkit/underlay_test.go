package testkit

import (
	"fmt"
	"testing"
	"time"
)

// TestUnderlayBridgeKeepsItsAddress: on a test underlay, a node that
// resolved the bridge's address stays able to reach it after a port with
// a lower MAC joins. With a bridge that has no address of its own the
// bridge takes the newcomer's MAC, and the node's frames (to the old MAC,
// another port's) are dropped.
func TestUnderlayBridgeKeepsItsAddress(t *testing.T) {
	ul := New(t)
	UnderlayBridge(t, ul, "ul0", "192.0.2.254/24")
	node := func(i int, portMAC string) string {
		ns := New(t)
		port := fmt.Sprintf("ulp%d", i)
		Run(t, ul, "ip", "link", "add", port, "address", portMAC, "type", "veth", "peer", "name", "eth0", "netns", ns)
		Run(t, ul, "ip", "link", "set", port, "master", "ul0", "up")
		Run(t, ns, "ip", "addr", "add", fmt.Sprintf("192.0.2.%d/24", i), "dev", "eth0")
		Run(t, ns, "ip", "link", "set", "eth0", "up")
		return ns
	}
	// Ports join as a, b, then c with the lowest MAC of all: a bridge
	// without an address of its own would take a's MAC, then c's.
	node(1, "02:00:00:00:00:20")
	b := node(2, "02:00:00:00:00:30")
	MustPing(t, b, "192.0.2.254", 1, 2*time.Second) // b resolves the bridge's address
	node(3, "02:00:00:00:00:10")
	if err := Ping(b, "192.0.2.254", 2, time.Second); err != nil {
		t.Fatalf("after a port with a lower MAC joined, node b no longer reaches the bridge's address: %v\nneighbours of b:\n%s",
			err, Run(t, b, "ip", "neigh"))
	}
	if got := Run(t, ul, "cat", "/sys/class/net/ul0/address"); got != UnderlayMAC("ul0")+"\n" {
		t.Fatalf("bridge address %q, want %s", got, UnderlayMAC("ul0"))
	}
}
