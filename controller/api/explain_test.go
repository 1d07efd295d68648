package api

import (
	"strings"
	"testing"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func TestFlowEnd(t *testing.T) {
	eps := []*skiffv1.Endpoint{
		{Name: "a", Network: "blue", Namespace: "prod", Ips: []string{"198.51.100.5/24"}},
		{Name: "b", Network: "red", Namespace: "dev", Ips: []string{"198.51.100.5/24"}},
		{Name: "c", Network: "red", Ips: []string{"198.51.100.7/24"}},
	}
	for _, tc := range []struct{ in, wantEP, wantIP, wantErr string }{
		{"a", "a", "198.51.100.5", ""},
		{"198.51.100.7", "c", "198.51.100.7", ""},
		{"203.0.113.9", "", "203.0.113.9", ""}, // outside the cluster
		{"198.51.100.5", "", "", "held by endpoints a, b"},
		{"nope", "", "", "neither an endpoint nor an IP address"},
		{"", "", "", "required"},
	} {
		e, ip, err := flowEnd(eps, "source", tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "source") {
				t.Errorf("%q: err %v, want one naming source with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		name := ""
		if e != nil {
			name = e.Name
		}
		if name != tc.wantEP || ip.String() != tc.wantIP {
			t.Errorf("%q: endpoint %q ip %s, want %q %s", tc.in, name, ip, tc.wantEP, tc.wantIP)
		}
	}
}
