package agent

import (
	"context"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
)

// learnInterval is how often a learning datapath is asked what it
// learnt (the offload datapath: the first frames between two endpoints
// take the node's bridge for about this long).
const learnInterval = time.Second

// learnLoop asks the datapath what it learnt every learnInterval until
// ctx ends, and reconciles when it needs a whole Apply for it.
func (a *Agent) learnLoop(ctx context.Context, l datapath.Learner) {
	every(ctx, learnInterval, func() {
		a.mu.Lock()
		ok := a.hasPlan
		a.mu.Unlock()
		if !ok {
			return
		}
		apply, err := l.Learn()
		if err != nil {
			a.log.Warn("datapath learning", "err", err)
		}
		if apply {
			a.resync()
		}
	})
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
