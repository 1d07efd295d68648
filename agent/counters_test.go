package agent

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// A report of an offload node's size is split into parts under the
// bound, numbered from 0, the networks in the first, every endpoint
// once and in order; a small report is one part.
func TestReportParts(t *testing.T) {
	req := &skiffv1.ReportCountersRequest{Node: "n1", Networks: []*skiffv1.NetworkCounters{{Network: "blue"}}}
	for i := range 250 {
		e := &skiffv1.EndpointCounters{Endpoint: fmt.Sprintf("e%03d", i)}
		for j := range 500 {
			e.Rules = append(e.Rules, &skiffv1.OffloadRule{Device: "eth1", Kind: "local", Rule: strings.Repeat("x", 100) + fmt.Sprint(j), State: "hardware"})
		}
		req.Endpoints = append(req.Endpoints, e)
	}
	if n := proto.Size(req); n < 4<<20 {
		t.Fatalf("the report is %d bytes, not past gRPC's 4 MiB", n)
	}
	parts := reportParts(req, reportPartBytes)
	var eps []string
	biggest := proto.Size(req.Endpoints[0])
	for i, p := range parts {
		if p.Part != uint32(i) || p.Node != "n1" {
			t.Errorf("part %d numbered %d of node %q", i, p.Part, p.Node)
		}
		if n := proto.Size(p); n > reportPartBytes+biggest {
			t.Errorf("part %d is %d bytes", i, n)
		}
		if (len(p.Networks) > 0) != (i == 0) {
			t.Errorf("part %d holds %d networks", i, len(p.Networks))
		}
		for _, e := range p.Endpoints {
			eps = append(eps, e.Endpoint)
		}
	}
	if len(parts) < 2 || len(eps) != 250 || eps[0] != "e000" || eps[249] != "e249" {
		t.Errorf("%d parts of %d endpoints (%v...)", len(parts), len(eps), eps[:min(3, len(eps))])
	}
	for i := 1; i < len(eps); i++ {
		if eps[i-1] >= eps[i] {
			t.Fatalf("endpoints out of order at %d: %s, %s", i, eps[i-1], eps[i])
		}
	}
	small := &skiffv1.ReportCountersRequest{Node: "n1", Endpoints: req.Endpoints[:1]}
	if parts := reportParts(small, reportPartBytes); len(parts) != 1 || len(parts[0].Endpoints) != 1 {
		t.Errorf("a small report in %d parts", len(parts))
	}
}
