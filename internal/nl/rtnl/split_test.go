package rtnl_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// splitNode is a namespace with a veth and n sockets in it.
func splitNode(t *testing.T, n int) (ns string, idx int, cs []*rtnl.Conn) {
	t.Helper()
	ns = testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "skr0", "type", "veth", "peer", "name", "skr1")
	for range n {
		c, err := rtnl.Dial(testkit.Path(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return ns, ifindex(t, ns, "skr0"), cs
}

func splitAddr(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
}

func addresses(t *testing.T, ns string) int {
	t.Helper()
	return strings.Count(testkit.Run(t, ns, "ip", "-4", "addr", "show", "dev", "skr0"), "inet 198.18.")
}

// TestSplit sends requests over two sockets at once, with refusals in the
// middle of windows of both runs: each refusal comes back on its own
// request, every other request took effect, both sockets carried a run,
// and every request was made once.
func TestSplit(t *testing.T) {
	ns, idx, cs := splitNode(t, 2)
	const n = 3*rtnl.SplitMin + 17
	bad := func(i int) bool { return i%97 == 5 }
	made := make([]int, n)
	errs, err := rtnl.Split(cs, n, func(i int) rtnl.Request {
		made[i]++
		dev := idx
		if bad(i) {
			dev = idx + 1000 // no such device
		}
		return rtnl.Request{Type: unix.RTM_NEWADDR, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: addrRequest(dev, splitAddr(i))}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != n {
		t.Fatalf("%d answers for %d requests", len(errs), n)
	}
	nbad := 0
	for i, e := range errs {
		if made[i] != 1 {
			t.Errorf("request %d made %d times", i, made[i])
		}
		switch {
		case bad(i):
			nbad++
			if !errors.Is(e, unix.ENODEV) {
				t.Errorf("request %d (no such device): %v, want ENODEV", i, e)
			}
		case e != nil:
			t.Errorf("request %d: %v", i, e)
		}
	}
	if got := addresses(t, ns); got != n-nbad {
		t.Errorf("%d addresses on skr0, want %d", got, n-nbad)
	}
	for k, c := range cs {
		if c.Sent() < rtnl.SplitMin {
			t.Errorf("socket %d sent %d messages, want a run of at least %d", k, c.Sent(), rtnl.SplitMin)
		}
	}
	if s := cs[0].Sent() + cs[1].Sent(); s != n {
		t.Errorf("%d messages sent for %d requests", s, n)
	}

	// Fewer than two runs' worth: all on the first socket, in order.
	s0, s1 := cs[0].Sent(), cs[1].Sent()
	errs, err = rtnl.Split(cs, 3, func(i int) rtnl.Request {
		return rtnl.Request{Type: unix.RTM_NEWADDR, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: addrRequest(idx, splitAddr(n+i))}
	})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("3 requests: %v %v", err, errs)
	}
	if cs[0].Sent()-s0 != 3 || cs[1].Sent() != s1 {
		t.Errorf("3 requests: %d on the first socket, %d on the second; want 3 and 0", cs[0].Sent()-s0, cs[1].Sent()-s1)
	}
}

// TestSplitSocketFailure: a run whose socket fails gives every request of
// it that failure; the other run's requests get their own answers.
func TestSplitSocketFailure(t *testing.T) {
	ns, idx, cs := splitNode(t, 2)
	cs[1].Close()
	const n = 2 * rtnl.SplitMin
	errs, err := rtnl.Split(cs, n, func(i int) rtnl.Request {
		return rtnl.Request{Type: unix.RTM_NEWADDR, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: addrRequest(idx, splitAddr(i))}
	})
	if err == nil || !strings.Contains(err.Error(), "socket 2 of 2") {
		t.Fatalf("err = %v, want the second socket's failure", err)
	}
	for i, e := range errs {
		switch {
		case i < n/2 && e != nil:
			t.Errorf("request %d (first socket): %v", i, e)
		case i >= n/2 && e == nil:
			t.Errorf("request %d (closed socket): no error", i)
		}
	}
	if got := addresses(t, ns); got != n/2 {
		t.Errorf("%d addresses on skr0, want %d (the first run)", got, n/2)
	}
}
