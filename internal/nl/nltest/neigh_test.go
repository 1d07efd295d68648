package nltest_test

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

func TestNeighs(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1"}))
	p0 := index(t, k, "p0")
	must(t, k.SetUp(p0))
	must(t, k.SetNeigh(nl.Neigh{LinkIndex: p0, IP: ip("2001:db8::7"), MAC: "02:00:00:00:00:07"}))
	must(t, k.SetNeigh(nl.Neigh{LinkIndex: p0, IP: ip("10.0.0.7"), MAC: "02:00:00:00:00:07"}))
	must(t, k.Resolve(p0, ip("10.0.0.8")))
	must(t, k.Resolve(p0, ip("10.0.0.8")))
	must(t, k.Resolve(p0, ip("10.0.0.7"))) // permanent: no probe
	got, _ := k.Neighs(p0)
	want := []nl.Neigh{{LinkIndex: p0, IP: ip("10.0.0.7"), MAC: "02:00:00:00:00:07", Permanent: true, Usable: true},
		{LinkIndex: p0, IP: ip("10.0.0.8")}, {LinkIndex: p0, IP: ip("2001:db8::7"), MAC: "02:00:00:00:00:07", Permanent: true, Usable: true}}
	if !slices.Equal(got, want) {
		t.Errorf("neighbours:\n%+v\nwant\n%+v", got, want)
	}
	ns := w.NS("")
	if n := ns.Probes("p0", ip("10.0.0.8")); n != 2 {
		t.Errorf("%d probes, want 2", n)
	}
	ns.NeighReply("p0", ip("10.0.0.8"), "02:00:00:00:00:08")
	must(t, k.Resolve(p0, ip("10.0.0.8")))
	if n := ns.Probes("p0", ip("10.0.0.8")); n != 2 {
		t.Errorf("%d probes after the reply, want still 2", n)
	}
	got, _ = k.Neighs(p0)
	if got[1] != (nl.Neigh{LinkIndex: p0, IP: ip("10.0.0.8"), MAC: "02:00:00:00:00:08", Usable: true}) {
		t.Errorf("after the reply: %+v", got[1])
	}
	must(t, k.DeleteNeigh(nl.Neigh{LinkIndex: p0, IP: ip("10.0.0.7")}))
	must(t, k.DeleteNeigh(nl.Neigh{LinkIndex: p0, IP: ip("10.0.0.7")}))
	for _, c := range []struct {
		what string
		err  error
	}{
		{"set on a gone link", k.SetNeigh(nl.Neigh{LinkIndex: 99, IP: ip("10.0.0.1"), MAC: "02:00:00:00:00:01"})},
		{"delete on a gone link", k.DeleteNeigh(nl.Neigh{LinkIndex: 99, IP: ip("10.0.0.1")})},
		{"resolve on a gone link", k.Resolve(99, ip("10.0.0.1"))},
	} {
		if !errors.Is(c.err, nl.ErrLinkGone) {
			t.Errorf("%s: %v, want ErrLinkGone", c.what, c.err)
		}
	}
	if ns, err := k.Neighs(99); err != nil || len(ns) != 0 {
		t.Errorf("neighbours of a gone link: %v, %v (the kernel's filtered dump: none)", ns, err)
	}
	must(t, k.SetDown(p0))
	if got, _ = k.Neighs(p0); len(got) != 0 {
		t.Errorf("neighbours of a link set down: %v", got)
	}
}

func TestFDB(t *testing.T) {
	k := open(t, nltest.New(), "")
	must(t, k.AddBridge(nl.Bridge{Name: "br0"}))
	must(t, k.AddVXLAN(nl.VXLAN{Name: "vx0", VNI: 5, Port: 4789}))
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1"}))
	br, vx, p0 := index(t, k, "br0"), index(t, k, "vx0"), index(t, k, "p0")
	must(t, k.SetMaster(vx, br))
	must(t, k.SetMaster(p0, br))
	zero := "00:00:00:00:00:00"
	self := func(mac, dst string) nl.FDB {
		return nl.FDB{LinkIndex: vx, MAC: mac, Dst: ip(dst), Self: true, Permanent: true}
	}
	master := func(link int, mac string) nl.FDB {
		return nl.FDB{LinkIndex: link, MAC: mac, Master: true, Static: true}
	}
	for _, c := range []struct {
		what string
		do   func(nl.FDB) error
		e    nl.FDB
		want error
	}{
		{"flood", k.AddFDB, self(zero, "192.0.2.1"), nil},
		{"flood again", k.AddFDB, self(zero, "192.0.2.1"), nil},
		{"flood 2", k.AddFDB, self(zero, "192.0.2.2"), nil},
		{"flood replaced", k.SetFDB, self(zero, "192.0.2.3"), unix.EOPNOTSUPP},
		{"remote", k.SetFDB, self("02:00:00:00:01:01", "192.0.2.1"), nil},
		{"remote moved", k.SetFDB, self("02:00:00:00:01:01", "192.0.2.2"), nil},
		{"remote appended: no second", k.AddFDB, self("02:00:00:00:01:01", "192.0.2.3"), nil},
		{"self not permanent", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:01:02", Dst: ip("192.0.2.1"), Self: true}, unix.EINVAL},
		{"self without a destination", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:01:02", Self: true, Permanent: true}, unix.EAFNOSUPPORT},
		{"bridge", k.SetFDB, master(vx, "02:00:00:00:01:01"), nil},
		{"bridge on p0", k.SetFDB, master(p0, "02:00:00:00:01:02"), nil},
		{"bridge moved to vx", k.SetFDB, master(vx, "02:00:00:00:01:02"), nil},
		{"bridge not a port", k.SetFDB, master(index(t, k, "p1"), "02:00:00:00:01:03"), unix.EOPNOTSUPP},
		{"gone link", k.SetFDB, master(99, "02:00:00:00:01:03"), nl.ErrLinkGone},
		{"bad mac", k.SetFDB, master(vx, "nope"), errors.New("any")},
	} {
		err := c.do(c.e)
		if (c.want == nil) != (err == nil) || c.want != nil && c.want.Error() != "any" && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}
	got, _ := k.FDB(vx)
	l, _ := k.LinkByName("vx0")
	want := []nl.FDB{{LinkIndex: vx, MAC: "02:00:00:00:01:01", Master: true, Static: true}, {LinkIndex: vx, MAC: "02:00:00:00:01:02", Master: true, Static: true},
		{LinkIndex: vx, MAC: l.MAC, Master: true, Permanent: true},
		self(zero, "192.0.2.1"), self(zero, "192.0.2.2"), self("02:00:00:00:01:01", "192.0.2.2")}
	if !slices.Equal(got, want) {
		t.Errorf("FDB of vx0:\n%+v\nwant\n%+v", got, want)
	}
	if got, _ := k.FDB(p0); len(got) != 1 || !got[0].Permanent {
		t.Errorf("FDB of p0 (the entry moved to vx0): %+v", got)
	}
	must(t, k.DeleteFDB(self(zero, "192.0.2.1")))
	must(t, k.DeleteFDB(self(zero, "192.0.2.9")))
	must(t, k.DeleteFDB(master(vx, "02:00:00:00:01:01")))
	must(t, k.DeleteFDB(master(vx, "02:00:00:00:01:09")))
	must(t, k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:01:01", Dst: ip("0.0.0.0"), Self: true}))
	got, _ = k.FDB(vx)
	want = []nl.FDB{{LinkIndex: vx, MAC: "02:00:00:00:01:02", Master: true, Static: true}, {LinkIndex: vx, MAC: l.MAC, Master: true, Permanent: true}, self(zero, "192.0.2.2")}
	if !slices.Equal(got, want) {
		t.Errorf("FDB of vx0 after deletes:\n%+v\nwant\n%+v", got, want)
	}
	if fdb, err := k.FDB(99); err != nil || len(fdb) != 0 {
		t.Errorf("FDB of a gone link: %v, %v", fdb, err)
	}
	must(t, k.SetMaster(vx, 0))
	if got, _ := k.FDB(vx); len(got) != 1 || !got[0].Self {
		t.Errorf("after leaving the bridge: %+v, want its own entry only", got)
	}
}
