package offloadbench

import (
	"fmt"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
)

// writeWatch samples a datapath's policy writes while it applies: when
// they start and end, and their rate through the run.
type writeWatch struct {
	done    chan struct{}
	over    chan struct{}
	start   time.Time
	w0      int
	samples []writeSample
}

type writeSample struct {
	at     time.Duration
	writes int
}

func watchWrites(dp *offload.Datapath) *writeWatch {
	w := &writeWatch{done: make(chan struct{}), over: make(chan struct{}), start: time.Now(), w0: dp.PolicyWrites()}
	go func() {
		defer close(w.over)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
				w.samples = append(w.samples, writeSample{time.Since(w.start), dp.PolicyWrites() - w.w0})
			}
		}
	}()
	return w
}

func (w *writeWatch) stop() {
	close(w.done)
	<-w.over
	w.samples = append(w.samples, writeSample{time.Since(w.start), w.samples[len(w.samples)-1].writes})
}

// summary: when the first policy write was seen, when the last, and the
// write rate over each tenth of the writes.
func (w *writeWatch) summary(total int) string {
	if total == 0 || len(w.samples) == 0 {
		return "no policy writes"
	}
	at := func(n int) time.Duration { // first sample with at least n writes
		for _, s := range w.samples {
			if s.writes >= n {
				return s.at
			}
		}
		return w.samples[len(w.samples)-1].at
	}
	first, last := at(1), at(total)
	var b strings.Builder
	fmt.Fprintf(&b, "policy writes from %v to %v (%.0f/s), Apply ends at %v; writes/s by tenth:", first.Round(10*time.Millisecond),
		last.Round(10*time.Millisecond), float64(total)/(last-first).Seconds(), w.samples[len(w.samples)-1].at.Round(10*time.Millisecond))
	for i := range 10 {
		lo, hi := total*i/10, total*(i+1)/10
		if d := at(hi) - at(max(lo, 1)); d > 0 {
			fmt.Fprintf(&b, " %.0f", float64(hi-lo)/d.Seconds())
		} else {
			b.WriteString(" -")
		}
	}
	return b.String()
}
