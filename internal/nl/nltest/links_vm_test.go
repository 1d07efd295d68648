package nltest_test

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestLinksManyVFs runs in the kernel VM: a netdevsim PF with 256 VFs in
// switchdev mode (a PF of a real NIC may have as many). The namespace's
// links list whole, the uplink and its 256 VF representors among them,
// and so do their counters: a listing that carried the PF's VF settings
// would not fit one read. The PF's VF settings are read whole, and links
// are found by name after it (a lookup whose answer once did not fit
// must not break the ones after).
func TestLinksManyVFs(t *testing.T) {
	guest.Require(t)
	name := fmt.Sprintf("nlvf%d", guestNS.Add(1))
	guest.AddNetns(t, name)
	const vfs = 256
	pf := guest.SwitchdevEswitch(t, name, 95, vfs)
	k, err := nl.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ls, err := k.Links()
	if err != nil {
		t.Fatalf("links of a namespace with a PF of %d VFs: %v", vfs, err)
	}
	uplink, reps := false, 0
	for _, l := range ls {
		switch {
		case l.Name == pf:
			uplink = l.SwitchID != ""
		case l.SwitchID != "":
			reps++
		}
	}
	if !uplink || reps != vfs {
		t.Fatalf("listed %d links: uplink %s found with its switch id %v, %d representors (want %d)", len(ls), pf, uplink, reps, vfs)
	}
	t.Logf("%d links listed, %d representors", len(ls), reps)
	// The counters of every link, read by a listing too.
	stats, err := k.Stats()
	if err != nil {
		t.Fatalf("counters of a namespace with a PF of %d VFs: %v", vfs, err)
	}
	if _, ok := stats[pf]; !ok || len(stats) != len(ls) {
		t.Fatalf("counters of %d links (the uplink's: %v), want those of the %d listed", len(stats), ok, len(ls))
	}
	// The PF's VF settings (one message larger than a 64 KiB read),
	// then links found by name and set as before.
	vfList, err := k.VFs(pf)
	if err != nil || len(vfList) != vfs {
		t.Fatalf("VFs of %s: %d, %v; want %d", pf, len(vfList), err, vfs)
	}
	if err := k.SetVFMAC(pf, 3, net.HardwareAddr{0x02, 0, 0, 0, 0x95, 3}); err != nil {
		t.Fatalf("a VF's MAC set through the PF: %v", err)
	}
	var rep string
	for _, l := range ls {
		if l.SwitchID != "" && l.Name != pf {
			rep = l.Name
			break
		}
	}
	for _, name := range []string{pf, rep} {
		if _, err := k.LinkByName(name); err != nil {
			t.Fatalf("%s by name after the PF's VFs were read: %v", name, err)
		}
	}
	if _, err := k.LinkByName("nosuch"); !errors.Is(err, nl.ErrNoLink) {
		t.Fatalf("a link that does not exist: %v, want ErrNoLink", err)
	}
	if err := k.AddPair(nl.Pair{Name: "skvfa", Peer: "skvfb", Alias: "skiff:test", PeerAlias: "skiff:test"}); err != nil {
		t.Fatalf("a pair added and marked after the PF's VFs were read: %v", err)
	}
}
