package offload

import (
	"maps"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// TestOnlyGateways: what an Apply's two link listings may differ by and
// still leave the Apply what the next one compares with.
func TestOnlyGateways(t *testing.T) {
	first := map[string]nl.Link{
		"eth2":        {Index: 4, Name: "eth2", SwitchID: "aa"},
		"skp1a2b3c4d": {Index: 9, Name: "skp1a2b3c4d", Alias: "skiff:ep:db2"},
	}
	with := func(ls ...nl.Link) map[string]nl.Link {
		m := maps.Clone(first)
		for _, l := range ls {
			m[l.Name] = l
		}
		return m
	}
	for _, c := range []struct {
		name   string
		second map[string]nl.Link
		want   bool
	}{
		{"the same", with(), true},
		{"a gateway pair made", with(nl.Link{Index: 10, Name: "skg100"}, nl.Link{Index: 11, Name: "skh100"}), true},
		{"the VXLAN device made", with(nl.Link{Index: 12, Name: VXLANName}), true},
		{"a pod's stand-in veth plumbed between them", with(nl.Link{Index: 13, Name: "skp96c3f499", Alias: "skiff:ep:web2"}), false},
		{"a link changed", with(nl.Link{Index: 14, Name: "skp1a2b3c4d", Alias: "skiff:ep:db2"}), false},
		{"a link gone", func() map[string]nl.Link { m := with(); delete(m, "eth2"); return m }(), false},
	} {
		if got := onlyGateways(first, c.second); got != c.want {
			t.Errorf("%s: onlyGateways = %v, want %v", c.name, got, c.want)
		}
	}
}
