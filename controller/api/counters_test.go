package api

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// A report in parts: the later parts of the node's current report add
// their endpoints; a part of another report is dropped; a new first part
// replaces the report.
func TestCountersParts(t *testing.T) {
	var c counters
	at := timestamppb.New(time.Unix(100, 0))
	later := timestamppb.New(time.Unix(110, 0))
	report := func(time *timestamppb.Timestamp, part uint32, eps ...string) *skiffv1.ReportCountersRequest {
		r := &skiffv1.ReportCountersRequest{Node: "n1", Time: time, Part: part}
		for _, e := range eps {
			r.Endpoints = append(r.Endpoints, &skiffv1.EndpointCounters{Endpoint: e, Counters: &skiffv1.Counters{RxPackets: uint64(part) + 1}})
		}
		return r
	}
	filled := func() map[string]uint64 {
		eps := []*skiffv1.Endpoint{{Name: "a", Node: "n1"}, {Name: "b", Node: "n1"}, {Name: "c", Node: "n1"}}
		c.fill(eps...)
		out := map[string]uint64{}
		for _, e := range eps {
			if e.Counters != nil {
				out[e.Name] = e.Counters.RxPackets
			}
		}
		return out
	}
	c.set(report(at, 0, "a"))
	c.set(report(at, 1, "b"))
	c.set(report(later, 2, "c")) // its part 0 never came
	if got := filled(); len(got) != 2 || got["a"] != 1 || got["b"] != 2 {
		t.Errorf("after parts 0 and 1 of one report and a stray part: %v, want a and b", got)
	}
	c.set(report(later, 0, "c"))
	if got := filled(); len(got) != 1 || got["c"] != 1 {
		t.Errorf("after a new report's part 0: %v, want c alone", got)
	}
}
