package testkit

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// UnderlayMAC is the fixed MAC of a test underlay bridge named name: a
// locally administered address (02:75:6c:...) derived from the name.
//
// A Linux bridge created without an address takes the lowest MAC of its
// ports, and changes it whenever a port with a lower MAC joins. A node that
// resolved the bridge's IP address before that keeps the old MAC, which is
// now only another port's: its frames enter the bridge on its own port,
// are taken for local delivery (the other port's address is local to the
// bridge) but arrive marked PACKET_OTHERHOST, and IP and ARP drop them.
// The node is cut off from whatever listens on the bridge (the test's
// controller) until its neighbour entry ages out, which takes longer than
// the agents' TCP user timeout. An underlay bridge must therefore have an
// address of its own from the start.
func UnderlayMAC(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	s := h.Sum32()
	return fmt.Sprintf("02:75:6c:%02x:%02x:%02x", byte(s>>16), byte(s>>8), byte(s))
}

// UnderlayBridgeArgs are the iproute2 arguments (after "ip") that create
// an underlay bridge with its fixed MAC.
func UnderlayBridgeArgs(name string) []string {
	return []string{"link", "add", name, "address", UnderlayMAC(name), "type", "bridge"}
}

// UnderlayBridge makes, in namespace ns, the bridge name with its fixed MAC
// (UnderlayMAC) and the address cidr (such as 192.0.2.254/24), up. It goes
// with the namespace.
func UnderlayBridge(t testing.TB, ns, name, cidr string) {
	t.Helper()
	Run(t, ns, append([]string{"ip"}, UnderlayBridgeArgs(name)...)...)
	Run(t, ns, "ip", "addr", "add", cidr, "dev", name)
	Run(t, ns, "ip", "link", "set", name, "up")
}
