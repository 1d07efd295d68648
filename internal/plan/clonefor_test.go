package plan

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// TestCloneFor: Apply on CloneFor's copy gives what it gives on a whole
// Clone and leaves the original as it was; the maps the delta does not
// change are the original's (shared), the others are copies.
func TestCloneFor(t *testing.T) {
	base := func() Plan {
		p := New("n1")
		p.Revision = 3
		p.Networks["pods"] = Network{Name: "pods", VNI: 1, MTU: 1450}
		p.Local["a"] = Endpoint{Name: "a", Network: "pods", Node: "n1"}
		p.Remote["r"] = Remote{Name: "r", Network: "pods", Node: "n2", VTEP: netip.MustParseAddr("192.0.2.2")}
		p.Policies["a"] = EndpointPolicy{Endpoint: "a", IngressIsolated: true}
		p.Groups["g"] = AddressGroup{Name: "g", Members: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}
		return p
	}
	d := func(f func(*Delta)) Delta {
		x := Delta{Node: "n1", From: 3, Revision: 4}
		f(&x)
		return x
	}
	for _, c := range []struct {
		name    string
		delta   Delta
		changes string // the maps the delta changes: N L R P G
	}{
		{"revision only", d(func(*Delta) {}), ""},
		{"network", d(func(x *Delta) { x.UpsertNetworks = []Network{{Name: "red", VNI: 2, MTU: 1450}} }), "N"},
		{"local removed", d(func(x *Delta) { x.RemoveLocal = []string{"a"} }), "L"},
		{"remote added", d(func(x *Delta) { x.UpsertRemote = []Remote{{Name: "s", Network: "pods", Node: "n3"}} }), "R"},
		{"policy", d(func(x *Delta) { x.UpsertPolicies = []EndpointPolicy{{Endpoint: "a", EgressIsolated: true}} }), "P"},
		{"group members", d(func(x *Delta) {
			x.ChangeGroups = []GroupChange{{Name: "g", Add: []netip.Addr{netip.MustParseAddr("198.51.100.2")}}}
		}), "G"},
		{"group removed, remote removed", d(func(x *Delta) { x.RemoveGroups, x.RemoveRemote = []string{"g"}, []string{"r"} }), "RG"},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig, want := base(), base()
			if err := want.Apply(c.delta); err != nil {
				t.Fatal(err)
			}
			got := orig.CloneFor(c.delta)
			if err := got.Apply(c.delta); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) || got.Revision != 4 {
				t.Fatalf("CloneFor then Apply: %+v, want %+v", got, want)
			}
			if b := base(); !orig.Equal(b) || orig.Revision != 3 {
				t.Fatalf("the original changed: %+v", orig)
			}
			for _, m := range []struct {
				key      string
				got, was any
			}{
				{"N", got.Networks, orig.Networks}, {"L", got.Local, orig.Local}, {"R", got.Remote, orig.Remote},
				{"P", got.Policies, orig.Policies}, {"G", got.Groups, orig.Groups},
			} {
				shared := reflect.ValueOf(m.got).Pointer() == reflect.ValueOf(m.was).Pointer()
				if changes := strings.Contains(c.changes, m.key); shared == changes {
					t.Errorf("map %s: shared %v, want %v", m.key, shared, !changes)
				}
			}
		})
	}
	// A plan with nil maps gets maps of its own.
	var empty Plan
	empty.Node = "n1"
	c := empty.CloneFor(Delta{Node: "n1"})
	if c.Networks == nil || c.Local == nil || c.Remote == nil || c.Policies == nil || c.Groups == nil {
		t.Fatalf("CloneFor of a zero plan left nil maps: %+v", c)
	}
}
