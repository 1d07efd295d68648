package agent

import (
	"net/netip"
	"strings"
	"testing"
)

// TestHostIP: --host-ip is the node's address of the other family than
// --underlay-ip, alone or in the node's address list (Kubernetes'
// status.hostIPs, the underlay address among them); anything else is
// refused naming the flag and the reason.
func TestHostIP(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, c := range []struct {
		list  string
		under netip.Addr
		want  string // the host address, or the error's text
	}{
		{"", v4, "invalid IP"},
		{"2001:db8::1", v4, "2001:db8::1"},
		{"192.0.2.1,2001:db8::1", v4, "2001:db8::1"},
		{"192.0.2.1", v4, "invalid IP"},
		{"2001:db8::1, 192.0.2.1", v6, "192.0.2.1"},
		{"nonsense", v4, `--host-ip: "nonsense" is not an IP address`},
		{"192.0.2.9", v4, "--host-ip: 192.0.2.9 is of --underlay-ip 192.0.2.1's family and not it"},
		{"2001:db8::1,2001:db8::2", v4, "--host-ip: 2001:db8::1 and 2001:db8::2: one address of the other family"},
	} {
		h, err := hostIP(c.list, c.under)
		got := h.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("hostIP(%q, %s) = %s, want %s", c.list, c.under, got, c.want)
		}
	}
}
