package guest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// IP, TC and Bridge are iproute2 inside the guest, by full path:
// busybox's applets shadow PATH; NFT is nftables' nft (what kube-proxy's
// nftables mode drives); Ping is busybox's ping.
const (
	IP     = "/usr/sbin/ip"
	TC     = "/usr/sbin/tc"
	Bridge = "/usr/sbin/bridge"
	NFT    = "/usr/sbin/nft"
	Ping   = "/bin/ping"
)

// Tools are the guest's programs for testkit's namespace helpers:
// guest.Tools.Run, Try, Ping and MustPing act in a named namespace as
// testkit.Run and the rest do on the host.
var Tools = testkit.Tools{IPCmd: IP, PingCmd: Ping}

// Run runs a command and returns its combined output, failing t when it
// fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// In runs a command in the named network namespace (ip netns exec),
// failing t when it fails.
func In(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return Tools.Run(t, ns, args...)
}

// AddNetns makes a named network namespace with lo up, deleted when the
// test ends.
func AddNetns(t testing.TB, name string) {
	t.Helper()
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, IP, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command(IP, "netns", "del", name).Run() })
	In(t, name, IP, "link", "set", "lo", "up")
}

// UnderlayBridge makes, in the guest's root namespace, an underlay bridge
// with a fixed MAC (testkit.UnderlayMAC says why it must have one) and the
// address cidr, up; it is deleted when the test ends.
func UnderlayBridge(t testing.TB, name, cidr string) {
	t.Helper()
	Run(t, append([]string{IP}, testkit.UnderlayBridgeArgs(name)...)...)
	t.Cleanup(func() { _ = exec.Command(IP, "link", "del", name).Run() })
	Run(t, IP, "addr", "add", cidr, "dev", name)
	Run(t, IP, "link", "set", name, "up")
}

// Backlog raises the guest's net.core.netdev_max_backlog to at least n
// frames until the test ends. A veth queues what it sends in one CPU's
// backlog (1,000 frames by default; a NIC's ring and qdisc play that
// part on a real node), so a broadcast copied to more VTEPs than that
// loses the copies past it.
func Backlog(t testing.TB, n int) {
	t.Helper()
	const path = "/proc/sys/net/core/netdev_max_backlog"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := strconv.Atoi(strings.TrimSpace(string(old))); err == nil && cur >= n {
		return
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0) })
}
