package nltest_test

import (
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

// Expect puts pieces of an expectation in State's order.
func TestExpect(t *testing.T) {
	got := nltest.Expect(`filter skvx ingress chain 3 prio 21249 protocol all handle 0x1 flower dst_mac 02:00:00:00:00:0a
qdisc skvx clsact
table inet skiff
  chain c
    counter drop`, `
link skvx vxlan mtu 1450 up external dstport 4789
neigh eth0 192.0.2.10 lladdr 02:00:00:00:00:10
addr eth0 192.0.2.10/24
route 10.0.0.0/8 dev eth0
table inet a (foreign)
  chain input type filter hook input priority 0; policy accept;
qdisc eth0 clsact
neigh eth0 192.0.2.9 lladdr 02:00:00:00:00:09
addr eth0 192.0.2.9/24
link eth0 device mtu 1500 up
sysctl net/ipv4/ip_forward = 1
fdb skvx 00:00:00:00:00:00 dst 192.0.2.2 self permanent
rule pref 2500 iif skg100 lookup 1`)
	want := `link eth0 device mtu 1500 up
link skvx vxlan mtu 1450 up external dstport 4789
addr eth0 192.0.2.9/24
addr eth0 192.0.2.10/24
fdb skvx 00:00:00:00:00:00 dst 192.0.2.2 self permanent
neigh eth0 192.0.2.9 lladdr 02:00:00:00:00:09
neigh eth0 192.0.2.10 lladdr 02:00:00:00:00:10
route 10.0.0.0/8 dev eth0
rule pref 2500 iif skg100 lookup 1
sysctl net/ipv4/ip_forward = 1
table inet a (foreign)
  chain input type filter hook input priority 0; policy accept;
table inet skiff
  chain c
    counter drop
qdisc eth0 clsact
qdisc skvx clsact
filter skvx ingress chain 3 prio 21249 protocol all handle 0x1 flower dst_mac 02:00:00:00:00:0a
`
	if got != want {
		t.Errorf("Expect:\n%s\nwant\n%s\ndiff:\n%s", got, want, nltest.Diff(want, got))
	}
	// A link's filters by direction, chain, priority and handle.
	got = nltest.Expect("filter skvx ingress chain 3 prio 21248 protocol arp handle 0x2 flower", "filter skvx egress chain 0 prio 1 protocol all handle 0x1 flower",
		"filter skvx ingress chain 3 prio 21249 protocol all handle 0xa flower", "filter skvx ingress chain 0 prio 21266 protocol all handle 0x1 flower",
		"filter skvx ingress chain 3 prio 21249 protocol all handle 0x9 flower")
	want = `filter skvx ingress chain 0 prio 21266 protocol all handle 0x1 flower
filter skvx ingress chain 3 prio 21248 protocol arp handle 0x2 flower
filter skvx ingress chain 3 prio 21249 protocol all handle 0x9 flower
filter skvx ingress chain 3 prio 21249 protocol all handle 0xa flower
filter skvx egress chain 0 prio 1 protocol all handle 0x1 flower
`
	if got != want {
		t.Errorf("Expect of filters:\n%s\nwant\n%s", got, want)
	}
	if nltest.Expect() != "" || nltest.Expect("", "\n") != "" {
		t.Error("an empty expectation is not the empty State")
	}
}

func TestDiff(t *testing.T) {
	want := "a\nb\nc\nd\ne\n"
	got := "a\nb\nC\nd\ne\nf\n"
	if d := nltest.Diff(want, got); d != "  b\n- c\n+ C\n  e\n+ f\n" {
		t.Errorf("Diff:\n%s", d)
	}
	if d := nltest.Diff(want, want); d != "" {
		t.Errorf("Diff of equal texts: %q", d)
	}
}

func TestShortCookies(t *testing.T) {
	in := "filter x ingress action gact drop cookie 736b0000f4bcc2437e65f306b8c36e7b action mirred cookie 736b5001a8\n"
	if got := nltest.ShortCookies(in); got != "filter x ingress action gact drop cookie 736b0000… action mirred cookie 736b5001…\n" {
		t.Errorf("ShortCookies: %q", got)
	}
}

func TestFilter(t *testing.T) {
	got := nltest.Filter("skvx", "3 21249 all 0x4", "not_in_hw", "dst_mac 02:00:00:00:00:0a", "736b0000…", "tunnel_key unset", "mirred egress redirect dev pf0vf0")
	if want := "filter skvx ingress chain 3 prio 21249 protocol all handle 0x4 flower not_in_hw dst_mac 02:00:00:00:00:0a action tunnel_key unset cookie 736b0000… action mirred egress redirect dev pf0vf0"; got != want {
		t.Errorf("Filter:\n%s\nwant\n%s", got, want)
	}
}
