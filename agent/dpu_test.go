package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
)

func TestDPUAway(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	for _, c := range []struct {
		st   plan.DPUStatus
		want string
	}{
		{plan.DPUStatus{}, ""},
		{plan.DPUStatus{Node: "d1", Registered: true, Connected: true, Since: now.Add(-time.Hour)}, ""},
		{plan.DPUStatus{Node: "d1"}, `this node's DPU "d1" has never registered`},
		{plan.DPUStatus{Node: "d1", Registered: true}, `DPU "d1" is not connected to the controller (not seen since the controller started)`},
		{plan.DPUStatus{Node: "d1", Registered: true, Since: now.Add(-2500 * time.Millisecond)}, `DPU "d1" is not connected to the controller: away for 2.5s (since 2026-01-01T12:00:07Z)`},
	} {
		got := dpuAway(c.st, now)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.st, got, c.want)
		}
	}
}
