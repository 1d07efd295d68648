package agent

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// maxPendingEvents bounds the events waiting to be reported; past it,
// events are counted and dropped.
const maxPendingEvents = 100

// event queues an event for the controller. Reports go out at most once per
// second, batched, so a flapping link cannot flood the controller.
func (a *Agent) event(kind, subject, detail string) {
	a.evMu.Lock()
	defer a.evMu.Unlock()
	if len(a.pending) >= maxPendingEvents {
		a.dropped++
		return
	}
	a.pending = append(a.pending, &skiffv1.NodeEvent{Time: timestamppb.Now(), Kind: kind, Subject: subject, Detail: detail})
}

func (a *Agent) reportEvents(ctx context.Context) {
	every(ctx, time.Second, func() {
		a.evMu.Lock()
		batch, dropped := a.pending, a.dropped
		a.pending, a.dropped = nil, 0
		a.evMu.Unlock()
		if dropped > 0 {
			batch = append(batch, &skiffv1.NodeEvent{Time: timestamppb.Now(), Kind: "events-dropped", Detail: itoa(dropped)})
		}
		if len(batch) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := a.client.ReportEvents(rctx, &skiffv1.ReportEventsRequest{Node: a.cfg.Node, Events: batch})
		cancel()
		if err != nil {
			a.log.Warn("reporting events", "events", len(batch), "err", err)
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
