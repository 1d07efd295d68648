package software

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMTUAdvice(t *testing.T) {
	for _, tc := range []struct {
		underlay string
		mtu      int
		advice   bool
	}{
		{"192.0.2.1", 1450, false},
		{"192.0.2.1", 9000, false},
		{"2001:db8:ff::1", 1430, false},
		{"2001:db8:ff::1", 1450, true},
	} {
		got := mtuAdvice(netip.MustParseAddr(tc.underlay), tc.mtu)
		if (got != "") != tc.advice || (got != "" && !strings.Contains(got, "1430")) {
			t.Errorf("mtuAdvice(%s, %d) = %q, want advice %v", tc.underlay, tc.mtu, got, tc.advice)
		}
	}
}
