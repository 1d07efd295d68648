package rtnl_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// addrRequest is an RTM_NEWADDR payload: struct ifaddrmsg and IFA_LOCAL,
// IFA_ADDRESS.
func addrRequest(index int, p netip.Prefix) []byte {
	b := []byte{unix.AF_INET, byte(p.Bits()), 0, unix.RT_SCOPE_UNIVERSE}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	e := rtnl.NewEncoder(b)
	a := p.Addr().As4()
	e.Put(unix.IFA_LOCAL, a[:])
	e.Put(unix.IFA_ADDRESS, a[:])
	return e.Bytes()
}

func ifindex(t *testing.T, ns, dev string) int {
	t.Helper()
	out := testkit.Run(t, ns, "cat", "/sys/class/net/"+dev+"/ifindex")
	var n int
	for _, c := range strings.TrimSpace(out) {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestDoPipelined sends more requests than one window holds, some of
// which the kernel refuses, and checks that every refusal comes back on
// its own request with the kernel's message, that the others took effect,
// and that a subscriber drains exactly the notifications of the changes
// made before the drain, telling them apart by port id.
func TestDoPipelined(t *testing.T) {
	ns := testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "skr0", "type", "veth", "peer", "name", "skr1")
	idx := ifindex(t, ns, "skr0")
	sub, err := rtnl.Dial(testkit.Path(ns), unix.RTNLGRP_IPV4_IFADDR)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	c, err := rtnl.Dial(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 3*rtnl.Window + 17
	var reqs []rtnl.Request
	bad := map[int]bool{}
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
		data := addrRequest(idx, p)
		if i%97 == 5 { // a device that does not exist
			bad[i] = true
			data = addrRequest(idx+1000, p)
		}
		reqs = append(reqs, rtnl.Request{Type: unix.RTM_NEWADDR, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: data})
	}
	// The last one repeats the first: EEXIST, on the window's
	// acknowledged request itself.
	reqs = append(reqs, reqs[0])
	bad[n] = true
	errs, err := c.Do(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		switch {
		case bad[i] && i == n:
			if !errors.Is(e, unix.EEXIST) {
				t.Errorf("request %d (a repeat): %v, want EEXIST", i, e)
			}
		case bad[i]:
			var re *rtnl.Error
			if !errors.Is(e, unix.ENODEV) || !errors.As(e, &re) {
				t.Errorf("request %d (no such device): %v, want ENODEV", i, e)
			}
		case e != nil:
			t.Errorf("request %d: %v", i, e)
		}
	}
	got := strings.Count(testkit.Run(t, ns, "ip", "-4", "addr", "show", "dev", "skr0"), "inet 198.18.")
	if want := n - len(bad) + 1; got != want {
		t.Errorf("%d addresses on skr0, want %d", got, want)
	}
	if c.Sent() != int64(len(reqs)) {
		t.Errorf("Sent() = %d, want %d", c.Sent(), len(reqs))
	}

	// Every notification of those changes is queued before Do returned.
	ours, others := 0, 0
	testkit.Run(t, ns, "ip", "addr", "add", "203.0.113.9/32", "dev", "skr0")
	count, err := sub.Drain(func(h rtnl.Header, _ []byte) {
		if h.PID == c.PortID() {
			ours++
		} else {
			others++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if ours != n-len(bad)+1 || others != 1 || count != ours+others {
		t.Errorf("drained %d notifications: %d of Do's (want %d), %d of ip's (want 1)", count, ours, n-len(bad)+1, others)
	}
	if again, err := sub.Drain(func(rtnl.Header, []byte) {}); err != nil || again != 0 {
		t.Errorf("second drain: %d messages, %v", again, err)
	}

	// A dump reads them all back.
	var dumped int
	err = c.Dump(unix.RTM_GETADDR, []byte{unix.AF_INET, 0, 0, 0, 0, 0, 0, 0}, func(_ rtnl.Header, b []byte) error {
		if int(binary.NativeEndian.Uint32(b[4:])) == idx {
			dumped++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dumped != got+1 {
		t.Errorf("dump: %d addresses of skr0, want %d", dumped, got+1)
	}
}
