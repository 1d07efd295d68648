package nltest_test

import (
	"fmt"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestLinksManyVFs runs in the kernel VM: a netdevsim PF with 256 VFs in
// switchdev mode (a PF of a real NIC may have as many). The namespace's
// links list whole, the uplink and its 256 VF representors among them: a
// listing that carried the PF's VF settings would not fit one read.
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
}
