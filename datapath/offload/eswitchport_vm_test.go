package offload

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestHostPortRemoteChange (kernel VM): on a node whose network has a
// host port, a remote endpoint that comes (a plan changed in remote
// endpoints only, which Apply makes by their own rules) gets its host
// port encap rule on sknp100 and its route through skn100 from the
// underlay address, and loses both when it goes; the decap rule of the
// node's own host port MAC and the gateway port's rule to the other
// node's host port stay throughout.
func TestHostPortRemoteChange(t *testing.T) {
	guest.Require(t)
	node := newNS(t, "skhprcnode")
	newNS(t, "skhprcpeer")
	// The underlay: the peer VTEP 192.0.2.2 in a namespace of its own.
	nsExec(t, "skhprcnode", guest.IP, "link", "add", "u0", "type", "veth", "peer", "name", "u0", "netns", "skhprcpeer")
	nsExec(t, "skhprcnode", guest.IP, "addr", "add", "192.0.2.1/24", "dev", "u0")
	nsExec(t, "skhprcnode", guest.IP, "link", "set", "u0", "up")
	nsExec(t, "skhprcpeer", guest.IP, "addr", "add", "192.0.2.2/24", "dev", "u0")
	nsExec(t, "skhprcpeer", guest.IP, "link", "set", "u0", "up")
	pf := guest.SwitchdevEswitch(t, "skhprcnode", 74, 1)
	rep := guest.Representors(t, "skhprcnode")["pf0vf0"]
	if rep == "" {
		t.Fatal("no pf0vf0 representor")
	}
	peer := netip.MustParseAddr("192.0.2.2")
	n := plan.Network{Name: "blue", VNI: 100, MTU: 1450, Egress: plan.EgressSNAT, FloodVTEPs: []netip.Addr{peer}, HostPortVTEPs: []netip.Addr{peer},
		Subnets: []plan.Subnet{{CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	p := plan.New("n1")
	p.Revision = 7
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = n
	p.Local["w"] = plan.Endpoint{Name: "w", Network: "blue", Kind: plan.KindVF, PF: pf, VFIndex: 0, MAC: "02:00:00:00:00:14",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.20/24")}}
	dp, err := New(Options{NetNS: node, Representor: func(plan.Endpoint) (Port, bool) { return Port{Rep: rep}, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		out := []string{nsExec(t, "skhprcnode", guest.IP, "-4", "route", "show", "table", "all", "proto", "83")}
		for _, dev := range []string{"sknp100", "skh100", VXLANName} {
			f, _ := tryIn("skhprcnode", guest.TC, "filter", "show", "dev", dev, "ingress")
			out = append(out, "== "+dev+"\n"+f)
		}
		return strings.Join(out, "\n")
	}
	const ownMAC, peerMAC = "06:64:c0:00:02:01", "06:64:c0:00:02:02"
	if got, want := datapath.HostMAC(100, p.UnderlayIP), ownMAC; got != want {
		t.Fatalf("HostMAC %s, want %s", got, want)
	}
	stays := func(got string) {
		t.Helper()
		for _, w := range []string{"192.0.2.2 dev skg100 table 1392509028", "dst_mac " + ownMAC, "dst_mac " + peerMAC} {
			if !strings.Contains(got, w) {
				t.Errorf("the node lacks %q:\n%s", w, got)
			}
		}
	}
	got := state()
	stays(got)
	if strings.Contains(got, "198.51.100.30") || strings.Contains(got, "02:00:00:00:00:1e") {
		t.Errorf("a remote endpoint's route or rule before it came:\n%s", got)
	}

	// A remote endpoint comes: only the remote endpoints change.
	q := p.Clone()
	q.Revision = 8
	q.Remote["r"] = plan.Remote{Name: "r", Network: "blue", Node: "n2", VTEP: peer, MAC: "02:00:00:00:00:1e",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.30/24")}}
	if c := classify(p, q); len(c.remotes) != 1 {
		t.Fatalf("classify: %+v, want one remote endpoint changed", c)
	}
	if err := dp.Apply(q); err != nil {
		t.Fatal(err)
	}
	got = state()
	stays(got)
	sknp := got[strings.Index(got, "== sknp100"):strings.Index(got, "== skh100")]
	if !strings.Contains(got, "198.51.100.30 dev skn100 scope link src 192.0.2.1") || !strings.Contains(sknp, "dst_mac 02:00:00:00:00:1e") {
		t.Errorf("the remote endpoint's route or host port rule is missing:\n%s", got)
	}

	// It goes.
	r := q.Clone()
	r.Revision = 9
	delete(r.Remote, "r")
	if err := dp.Apply(r); err != nil {
		t.Fatal(err)
	}
	got = state()
	stays(got)
	if strings.Contains(got, "198.51.100.30") || strings.Contains(got, "02:00:00:00:00:1e") {
		t.Errorf("the remote endpoint's route or rule stayed after it went:\n%s", got)
	}
}
