package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestNewPool(t *testing.T) {
	tests := []struct {
		spec      SubnetSpec
		field     string // "" = valid
		gw        string
		wantWords string
	}{
		{SubnetSpec{CIDR: "192.0.2.0/24"}, "", "192.0.2.1", ""},
		{SubnetSpec{CIDR: "2001:db8::/64"}, "", "2001:db8::1", ""},
		{SubnetSpec{CIDR: "192.0.2.0/24", Gateway: "192.0.2.254"}, "", "192.0.2.254", ""},
		{SubnetSpec{CIDR: ""}, "cidr", "", "required"},
		{SubnetSpec{CIDR: "192.0.2.0"}, "cidr", "", "not a CIDR"},
		{SubnetSpec{CIDR: "192.0.2.9/24"}, "cidr", "", "did you mean 192.0.2.0/24"},
		{SubnetSpec{CIDR: "192.0.2.0/31"}, "cidr", "", "at most /30"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Gateway: "192.0.2.255"}, "gateway", "", "not a usable"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Gateway: "x"}, "gateway", "", "not an IP"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Ranges: [][2]string{{"192.0.2.50", "192.0.2.10"}}}, "ranges[0]", "", "after end"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Ranges: [][2]string{{"192.0.2.10", "198.51.100.1"}}}, "ranges[0]", "", "not inside"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Exclusions: []string{"203.0.113.0/24"}}, "exclusions[0]", "", "not inside"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Exclusions: []string{"nope"}}, "exclusions[0]", "", "not an IP"},
		// A mixed-up family: the field and both families are named.
		{SubnetSpec{CIDR: "2001:db8::/64", Gateway: "192.0.2.1"}, "gateway", "", "192.0.2.1 is an IPv4 address, but cidr 2001:db8::/64 is IPv6"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Gateway: "2001:db8::1"}, "gateway", "", "2001:db8::1 is an IPv6 address, but cidr 192.0.2.0/24 is IPv4"},
		{SubnetSpec{CIDR: "192.0.2.0/24", Gateway: "::ffff:192.0.2.1"}, "gateway", "", "is an IPv6 address"},
		{SubnetSpec{CIDR: "2001:db8::/64", Ranges: [][2]string{{"2001:db8::10", "192.0.2.9"}}}, "ranges[0]", "", "192.0.2.9 is an IPv4 address"},
		{SubnetSpec{CIDR: "2001:db8::/64", Exclusions: []string{"192.0.2.0/28"}}, "exclusions[0]", "", "is an IPv4 address, but cidr 2001:db8::/64 is IPv6"},
	}
	for _, tc := range tests {
		p, err := NewPool(tc.spec)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.spec, err)
			} else if p.Gateway.String() != tc.gw {
				t.Errorf("%+v: gateway %s, want %s", tc.spec, p.Gateway, tc.gw)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.wantWords) {
			t.Errorf("%+v: got %v, want field %s saying %q", tc.spec, err, tc.field, tc.wantWords)
		}
	}
}

func TestNextSkipsReservedAndTaken(t *testing.T) {
	p, err := NewPool(SubnetSpec{CIDR: "192.0.2.0/29", Exclusions: []string{"192.0.2.3"}})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[netip.Addr]bool{}
	var got []string
	for {
		a, ok := p.Next(p.Offset(0), func(a netip.Addr) bool { return taken[a] })
		if !ok {
			break
		}
		taken[a] = true
		got = append(got, a.String())
	}
	// .0 network, .1 gateway, .3 excluded, .7 broadcast.
	if want := "192.0.2.2 192.0.2.4 192.0.2.5 192.0.2.6"; strings.Join(got, " ") != want {
		t.Fatalf("allocated %v, want %s", got, want)
	}
}

func TestNextWrapsAcrossRanges(t *testing.T) {
	p, err := NewPool(SubnetSpec{CIDR: "192.0.2.0/24", Ranges: [][2]string{{"192.0.2.10", "192.0.2.11"}, {"192.0.2.20", "192.0.2.20"}}})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.20"): true}
	a, ok := p.Next(netip.MustParseAddr("192.0.2.20"), func(a netip.Addr) bool { return taken[a] })
	if !ok || a.String() != "192.0.2.10" {
		t.Fatalf("got %v %v, want wrap to 192.0.2.10", a, ok)
	}
	if p.Size() != 3 {
		t.Fatalf("size %d, want 3", p.Size())
	}
}

func TestMAC(t *testing.T) {
	a, b := MAC("blue", "pod-a", 0), MAC("blue", "pod-a", 0)
	if a != b {
		t.Fatal("MAC not deterministic")
	}
	if MAC("blue", "pod-a", 1) == a || MAC("red", "pod-a", 0) == a {
		t.Fatal("MAC does not depend on attempt and network")
	}
	if _, err := ParseMAC(a); err != nil {
		t.Fatalf("derived MAC %s is not a valid unicast MAC: %v", a, err)
	}
	if a[1] != '2' && a[1] != '6' && a[1] != 'a' && a[1] != 'e' {
		t.Fatalf("derived MAC %s is not locally administered", a)
	}
	for _, bad := range []string{"zz", "01:00:5e:00:00:01", "00:00:00:00:00:00", "00:11:22:33:44:55:66:77"} {
		if _, err := ParseMAC(bad); err == nil {
			t.Errorf("ParseMAC(%q) accepted", bad)
		}
	}
}
