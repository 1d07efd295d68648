package firewall_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// replyMark is the mark offload nodes use (offload/flower ReplyMark).
const replyMark = 0x00200000

// TestReplyMark: with Device.ReplyMark, what leaves the device on
// a connection conntrack holds established (the node's echo replies, its
// own echo requests after the first reply) carries the mark where the
// device's peer receives it (an offload node's gateway port); a new
// connection's first packet does not; without ReplyMark nothing is
// marked; a second SetIsolation writes nothing.
func TestReplyMark(t *testing.T) {
	node, pod := testkit.New(t), testkit.New(t)
	for _, c := range [][]string{
		{"ip", "link", "add", "skg100", "type", "veth", "peer", "name", "gwp"},
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "add", "pp", "type", "veth", "peer", "name", "eth0", "netns", pod},
		{"ip", "link", "set", "gwp", "master", "br0"},
		{"ip", "link", "set", "pp", "master", "br0"},
		{"ip", "addr", "add", "198.51.100.1/24", "dev", "skg100"},
	} {
		testkit.Run(t, node, c...)
	}
	for _, l := range []string{"skg100", "gwp", "br0", "pp"} {
		testkit.Run(t, node, "ip", "link", "set", l, "up")
	}
	testkit.Run(t, pod, "ip", "addr", "add", "198.51.100.2/24", "dev", "eth0")
	testkit.Run(t, pod, "ip", "link", "set", "eth0", "up")
	// What the peer receives, by mark.
	f := filepath.Join(t.TempDir(), "count.nft")
	rules := fmt.Sprintf(`table netdev count {
	chain in {
		type filter hook ingress device gwp priority 0;
		icmp type echo-request meta mark & %#x == %#x counter comment "request-marked"
		icmp type echo-reply meta mark & %#x == %#x counter comment "reply-marked"
		icmp type echo-request meta mark & %#x == 0 counter comment "request-plain"
	}
}
`, replyMark, replyMark, replyMark, replyMark, replyMark)
	if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, node, "nft", "-f", f)
	counts := func() map[string]int {
		out := testkit.Run(t, node, "nft", "list", "table", "netdev", "count")
		got := map[string]int{}
		for _, l := range strings.Split(out, "\n") {
			_, c, ok := strings.Cut(l, `comment "`)
			if !ok {
				continue
			}
			var n int
			_, after, _ := strings.Cut(l, "packets ")
			fmt.Sscan(after, &n)
			got[strings.TrimSuffix(strings.TrimSpace(c), `"`)] = n
		}
		return got
	}
	fw := open(t, node)
	isolate := func(devs []firewall.Device) error {
		_, err := fw.k.SetTable(firewall.Isolation(devs))
		return err
	}
	ping := func(ns, dst string) {
		t.Helper()
		testkit.Run(t, ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", dst)
	}

	// Without ReplyMark: nothing marked.
	if err := isolate([]firewall.Device{{Name: "skg100", Egress: "snat"}}); err != nil {
		t.Fatal(err)
	}
	ping(pod, "198.51.100.1")
	ping(node, "198.51.100.2")
	if c := counts(); c["request-marked"] != 0 || c["reply-marked"] != 0 || c["request-plain"] != 3 {
		t.Fatalf("without ReplyMark: counts %v, want no marked packet and 3 plain requests", c)
	}
	before := counts()
	since := func() map[string]int {
		c := counts()
		for k := range c {
			c[k] -= before[k]
		}
		return c
	}

	want := []firewall.Device{{Name: "skg100", Egress: "snat", ReplyMark: replyMark}}
	if err := isolate(want); err != nil {
		t.Fatal(err)
	}
	w := fw.k.Writes()
	if err := isolate(want); err != nil || fw.k.Writes() != w {
		t.Fatalf("the same rules again: %v, %d writes", err, fw.k.Writes()-w)
	}
	// The node's replies to the pod's pings: established, marked.
	ping(pod, "198.51.100.1")
	if c := since(); c["reply-marked"] != 3 {
		t.Errorf("the node's 3 echo replies: %d marked (%v)", c["reply-marked"], c)
	}
	// The node's own pings: the first is new, the next two established.
	ping(node, "198.51.100.2")
	if c := since(); c["request-marked"] != 2 || c["request-plain"] != 1 {
		t.Errorf("the node's 3 echo requests: %d marked, %d plain; want 2 and 1 (%v)", c["request-marked"], c["request-plain"], c)
	}
}
