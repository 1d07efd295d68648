package nltest_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

var (
	pfx = netip.MustParsePrefix
	ip  = netip.MustParseAddr
)

func TestAddrs(t *testing.T) {
	k := open(t, nltest.New(), "")
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1"}))
	p0 := index(t, k, "p0")
	for _, a := range []string{"10.0.0.1/24", "10.0.0.1/24", "10.0.0.2/24", "10.0.0.1/16", "fe80::1/64", "2001:db8::1/64", "2001:db8::1/48", "2001:db8::2/64"} {
		must(t, k.AddAddr(p0, pfx(a)))
	}
	got, _ := k.Addrs(p0)
	want := []netip.Prefix{pfx("10.0.0.1/24"), pfx("10.0.0.2/24"), pfx("10.0.0.1/16"), pfx("2001:db8::2/64"), pfx("2001:db8::1/64")}
	if !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v (IPv4 by address and length, IPv6 by address and newest first, link-local hidden)", got, want)
	}
	must(t, k.DeleteAddr(p0, pfx("10.0.0.1/24"))) // the primary takes its secondary
	must(t, k.DeleteAddr(p0, pfx("2001:db8::1/48")))
	must(t, k.DeleteAddr(p0, pfx("10.9.9.9/24")))
	got, _ = k.Addrs(p0)
	want = []netip.Prefix{pfx("10.0.0.1/16"), pfx("2001:db8::2/64"), pfx("2001:db8::1/64")}
	if !slices.Equal(got, want) {
		t.Errorf("after deletes: %v, want %v", got, want)
	}
	if _, err := k.Addrs(99); !errors.Is(err, nl.ErrLinkGone) {
		t.Errorf("addresses of a gone link: %v", err)
	}
	if err := k.DeleteAddr(99, pfx("10.0.0.1/16")); !errors.Is(err, nl.ErrLinkGone) {
		t.Errorf("delete on a gone link: %v", err)
	}
	must(t, k.SetUp(p0))
	must(t, k.SetDown(p0))
	if got, _ = k.Addrs(p0); !slices.Equal(got, []netip.Prefix{pfx("10.0.0.1/16")}) {
		t.Errorf("after down: %v, want the IPv4 address only", got)
	}
}

func TestRoutes(t *testing.T) {
	k := open(t, nltest.New(), "")
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1"}))
	p0, p1 := index(t, k, "p0"), index(t, k, "p1")
	must(t, k.SetUp(p0))
	must(t, k.AddAddr(p0, pfx("10.0.0.1/24")))
	must(t, k.AddAddr(p0, pfx("10.0.0.9/32")))
	must(t, k.AddAddr(p0, pfx("2001:db8::1/64")))
	skiff := func(dst, gw string, table int) nl.Route {
		r := nl.Route{Dst: pfx(dst), LinkIndex: p0, Table: table, Protocol: nl.RouteProtocol}
		if gw != "" {
			r.Gw = ip(gw)
		}
		return r
	}
	for _, c := range []struct {
		what string
		r    nl.Route
		want error
	}{
		{"via", skiff("10.9.0.0/16", "10.0.0.2", 0), nil},
		{"replaced", skiff("10.9.0.0/16", "10.0.0.3", 0), nil},
		{"table", skiff("0.0.0.0/0", "10.0.0.254", 100), nil},
		{"on link, host bits", skiff("10.8.0.1/16", "", 0), nil},
		{"v6", skiff("2001:db8:9::/48", "2001:db8::2", 0), nil},
		{"kernel's protocol", nl.Route{Dst: pfx("10.7.0.0/16"), LinkIndex: p0}, nil},
		{"unreachable gateway", skiff("10.6.0.0/16", "10.5.0.1", 0), unix.ENETUNREACH},
		{"unreachable v6 gateway", skiff("2001:db8:6::/48", "2001:db8:5::1", 0), unix.EHOSTUNREACH},
		{"missing link", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: 99}, unix.ENODEV},
		{"down link", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: p1}, unix.ENETDOWN},
		{"foreign source", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: p0, Src: ip("10.77.0.1")}, unix.EINVAL},
	} {
		if err := k.ReplaceRoute(c.r); (c.want == nil) != (err == nil) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}
	if err := k.ReplaceRoute(nl.Route{LinkIndex: p0}); err == nil {
		t.Error("a route without a destination")
	}
	rs, _ := k.Routes()
	want := []nl.Route{skiff("10.8.0.0/16", "", 0), skiff("10.9.0.0/16", "10.0.0.3", 0), skiff("2001:db8:9::/48", "2001:db8::2", 0), skiff("0.0.0.0/0", "10.0.0.254", 100)}
	if !slices.Equal(rs, want) {
		t.Errorf("Routes:\n%v\nwant\n%v", rs, want)
	}
	lr, _ := k.LinkRoutes(p0)
	if len(lr) != 6 || !slices.Contains(lr, nl.Route{Dst: pfx("10.0.0.0/24"), LinkIndex: p0, Src: ip("10.0.0.1"), Protocol: unix.RTPROT_KERNEL}) ||
		!slices.Contains(lr, nl.Route{Dst: pfx("10.7.0.0/16"), LinkIndex: p0, Protocol: unix.RTPROT_BOOT}) {
		t.Errorf("LinkRoutes (main table, every protocol, connected ones):\n%v", lr)
	}
	for _, c := range []struct {
		dst  string
		want nl.NextHop
	}{
		{"10.9.1.1", nl.NextHop{LinkIndex: p0, Gateway: ip("10.0.0.3")}},
		{"10.0.0.7", nl.NextHop{LinkIndex: p0}},
		{"10.0.0.9", nl.NextHop{LinkIndex: 1, Local: true}},
		{"2001:db8:9::1", nl.NextHop{LinkIndex: p0, Gateway: ip("2001:db8::2")}},
	} {
		if got, err := k.RouteTo(ip(c.dst)); err != nil || got != c.want {
			t.Errorf("route to %s: %+v, %v; want %+v", c.dst, got, err, c.want)
		}
	}
	if _, err := k.RouteTo(ip("198.51.100.1")); !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("route to nowhere: %v", err)
	}
	must(t, k.DeleteRoute(nl.Route{Dst: pfx("10.9.0.0/16"), Gw: ip("10.0.0.99"), LinkIndex: p0})) // another gateway: not it
	must(t, k.DeleteRoute(nl.Route{Dst: pfx("10.8.0.0/16"), LinkIndex: p0}))
	must(t, k.DeleteRoute(nl.Route{Dst: pfx("0.0.0.0/0"), Table: 100})) // on link: not the route via a gateway
	if rs, _ := k.Routes(); len(rs) != 3 {
		t.Errorf("after deletes: %v", rs)
	}
	must(t, k.DeleteRoute(nl.Route{Dst: pfx("0.0.0.0/0"), Gw: ip("10.0.0.254"), Table: 100}))
	if rs, _ := k.Routes(); len(rs) != 2 {
		t.Errorf("after deletes: %v", rs)
	}
	must(t, k.SetDown(p0))
	if rs, _ := k.Routes(); len(rs) != 0 {
		t.Errorf("routes through a link set down stay: %v", rs)
	}
}

func TestRules(t *testing.T) {
	k := open(t, nltest.New(), "")
	r4 := nl.Rule{IIF: "br0", Table: 100, Priority: 100}
	r6 := nl.Rule{IIF: "br0", Table: 100, Priority: 100, IPv6: true}
	for _, r := range []nl.Rule{r6, r4, r4, {IIF: "x", Table: 5, Priority: 200}} {
		must(t, k.AddRule(r))
	}
	if got, _ := k.Rules(100); !slices.Equal(got, []nl.Rule{r4, r6}) {
		t.Errorf("rules %v, want %v", got, []nl.Rule{r4, r6})
	}
	must(t, k.DeleteRule(r6))
	must(t, k.DeleteRule(r6))
	if got, _ := k.Rules(100); !slices.Equal(got, []nl.Rule{r4}) {
		t.Errorf("rules %v after delete", got)
	}
	if err := k.AddRule(nl.Rule{IIF: "x", Priority: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("a rule without a table: %v", err)
	}
}
