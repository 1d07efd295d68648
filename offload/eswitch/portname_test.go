package eswitch

import "testing"

func TestParsePortName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortName
		ok   bool
	}{
		{"p0", PortName{Kind: PortUplink, PF: 0, VF: -1, SF: -1, Split: -1}, true},
		{"p1", PortName{Kind: PortUplink, PF: 1, VF: -1, SF: -1, Split: -1}, true},
		{"p0s1", PortName{Kind: PortUplink, PF: 0, VF: -1, SF: -1, Split: 1}, true},
		{"pf0vf3", PortName{Kind: PortVF, PF: 0, VF: 3, SF: -1, Split: -1}, true},
		{"pf1vf12", PortName{Kind: PortVF, PF: 1, VF: 12, SF: -1, Split: -1}, true},
		{"c1pf0vf3", PortName{Kind: PortVF, Controller: 1, External: true, PF: 0, VF: 3, SF: -1, Split: -1}, true},
		{"pf0hpf", PortName{Kind: PortHostPF, Controller: 1, External: true, PF: 0, VF: -1, SF: -1, Split: -1}, true},
		{"c1pf1", PortName{Kind: PortHostPF, Controller: 1, External: true, PF: 1, VF: -1, SF: -1, Split: -1}, true},
		{"pf0sf88", PortName{Kind: PortSF, PF: 0, VF: -1, SF: 88, Split: -1}, true},
		{"c1pf0sf2", PortName{Kind: PortSF, Controller: 1, External: true, PF: 0, VF: -1, SF: 2, Split: -1}, true},
		{"", PortName{}, false},
		{"pf0vf", PortName{}, false},
		{"pfXvf1", PortName{}, false},
		{"p", PortName{}, false},
		{"c1", PortName{}, false},
		{"eth0", PortName{}, false},
		{"pf0vf1 ", PortName{}, false},
		{"pf0vf99999999999999999999", PortName{}, false},
	} {
		got, err := ParsePortName(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParsePortName(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if got != tc.want {
			t.Errorf("ParsePortName(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if tc.ok && tc.want.Kind != PortHostPF && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}
