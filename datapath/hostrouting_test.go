package datapath

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// recordHost is a Routing whose routes and rules are maps, recording
// every write in order.
type recordHost struct {
	routes map[nl.Route]bool
	rules  map[nl.Rule]bool
	ops    []string
}

func (h *recordHost) Routes() ([]nl.Route, error) {
	var out []nl.Route
	for r := range h.routes {
		out = append(out, r)
	}
	return out, nil
}

// ReplaceRoute replaces the route to the same prefix in the same table,
// as the kernel does.
func (h *recordHost) ReplaceRoute(r nl.Route) error {
	for o := range h.routes {
		if o.Dst == r.Dst && o.Table == r.Table {
			delete(h.routes, o)
		}
	}
	h.routes[r] = true
	h.ops = append(h.ops, "replace route "+r.Dst.String()+" src "+r.Src.String())
	return nil
}

// DeleteRoute deletes only an exact match, as the kernel does for a
// route given with its source and device.
func (h *recordHost) DeleteRoute(r nl.Route) error {
	delete(h.routes, r)
	h.ops = append(h.ops, "delete route "+r.Dst.String()+" src "+r.Src.String())
	return nil
}

func (h *recordHost) Rules(int) ([]nl.Rule, error) {
	var out []nl.Rule
	for r := range h.rules {
		out = append(out, r)
	}
	return out, nil
}

func (h *recordHost) AddRule(r nl.Rule) error {
	h.rules[r] = true
	h.ops = append(h.ops, "add rule "+r.IIF)
	return nil
}

func (h *recordHost) DeleteRule(r nl.Rule) error {
	delete(h.rules, r)
	h.ops = append(h.ops, "delete rule "+r.IIF)
	return nil
}

// TestSyncHostRouting: transitions of Skiff's host routing. Adds come
// before deletes; a route whose source changed is replaced in place, not
// deleted after; an unchanged state writes nothing.
func TestSyncHostRouting(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	r1 := nl.Route{Dst: p("198.51.100.2/32"), LinkIndex: 7, Src: a("192.0.2.1"), Table: HostTable(100)}
	r2 := nl.Route{Dst: p("198.51.100.3/32"), LinkIndex: 7, Src: a("192.0.2.1"), Table: HostTable(100)}
	r1src := r1
	r1src.Src = a("192.0.2.9")
	g100 := nl.Rule{IIF: "skg100", Table: HostTable(100), Priority: HostRulePriority}
	g200 := nl.Rule{IIF: "skg200", Table: HostTable(200), Priority: HostRulePriority}
	for _, tc := range []struct {
		name       string
		haveRoutes []nl.Route
		haveRules  []nl.Rule
		want       HostRouting
		ops        []string
	}{
		{"empty to empty", nil, nil, NewHostRouting(), nil},
		{"add", nil, nil, routing([]nl.Route{r1}, []nl.Rule{g100}),
			[]string{"replace route 198.51.100.2/32 src 192.0.2.1", "add rule skg100"}},
		{"unchanged", []nl.Route{r1}, []nl.Rule{g100}, routing([]nl.Route{r1}, []nl.Rule{g100}), nil},
		{"swap: add before delete", []nl.Route{r1}, []nl.Rule{g100}, routing([]nl.Route{r2}, []nl.Rule{g200}),
			[]string{"replace route 198.51.100.3/32 src 192.0.2.1", "add rule skg200", "delete route 198.51.100.2/32 src 192.0.2.1", "delete rule skg100"}},
		{"source changed: replaced, not deleted", []nl.Route{r1}, nil, routing([]nl.Route{r1src}, nil),
			[]string{"replace route 198.51.100.2/32 src 192.0.2.9"}},
		{"all gone", []nl.Route{r1, r2}, []nl.Rule{g100}, NewHostRouting(),
			[]string{"delete route 198.51.100.2/32 src 192.0.2.1", "delete route 198.51.100.3/32 src 192.0.2.1", "delete rule skg100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &recordHost{routes: map[nl.Route]bool{}, rules: map[nl.Rule]bool{}}
			for _, r := range tc.haveRoutes {
				h.routes[r] = true
			}
			for _, r := range tc.haveRules {
				h.rules[r] = true
			}
			if err := SyncHostRouting(h, tc.want); err != nil {
				t.Fatal(err)
			}
			// Deletes among themselves come in map order: compare them sorted.
			got := sortDeletes(h.ops)
			if !slices.Equal(got, tc.ops) {
				t.Errorf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.ops, "\n"))
			}
			if !mapsEqual(h.routes, tc.want.Routes) || !mapsEqual(h.rules, tc.want.Rules) {
				t.Errorf("state after: routes %v rules %v, want %v %v", h.routes, h.rules, tc.want.Routes, tc.want.Rules)
			}
			h.ops = nil
			if err := SyncHostRouting(h, tc.want); err != nil || len(h.ops) != 0 {
				t.Errorf("second sync: err %v, wrote %v", err, h.ops)
			}
		})
	}
}

func routing(routes []nl.Route, rules []nl.Rule) HostRouting {
	st := NewHostRouting()
	for _, r := range routes {
		st.Routes[r] = true
	}
	for _, r := range rules {
		st.Rules[r] = true
	}
	return st
}

// sortDeletes sorts the runs of route deletes (their order is a map's).
func sortDeletes(ops []string) []string {
	out := slices.Clone(ops)
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && strings.HasPrefix(out[j], "delete route") {
			j++
		}
		slices.Sort(out[i:j])
		i = max(j, i+1)
	}
	return out
}

func mapsEqual[K comparable](a, b map[K]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
