package flower

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// change is one filter write of a programmer: f at its (explicit)
// handle, asked for in hardware first (skip_sw) when hw.
type change struct {
	kind tc.OpKind
	f    tc.Filter
	hw   bool
}

// outcome is what became of a change: err when the kernel refused it
// (in software too), refused (the driver's errno and message) when it
// runs in software because hardware refused it.
type outcome struct {
	err     error
	refused error
	inHW    bool
}

// writer writes filters. pipelined: many requests per sendmsg, bulk
// writes split across the connection's sockets (tc.Conn.WriteAny);
// otherwise one request and its answer at a time over one socket.
type writer struct {
	c         tc.Client
	writes    *atomic.Int64
	spent     *atomic.Int64 // nanoseconds in c's writes
	pipelined bool
}

// do carries out ops, which must not depend on each other (a caller
// with a barrier calls do once per group), and returns one error per op.
func (w writer) do(ops []tc.Op) ([]error, error) {
	w.writes.Add(int64(len(ops)))
	start := time.Now()
	defer func() { w.spent.Add(int64(time.Since(start))) }()
	if w.pipelined {
		return w.c.WriteAny(ops)
	}
	errs := make([]error, len(ops))
	for i := range ops {
		es, err := w.c.Write(ops[i : i+1])
		if err != nil {
			return errs, err
		}
		errs[i] = es[0]
	}
	return errs, nil
}

// apply carries out cs, which must not depend on each other: those
// asking for hardware with skip_sw first; those hardware refused are
// written again without flags after the others of cs (soft gives the
// filter to write then: a cookie may record the refusal). The order
// among cs is not promised (bulk writes go over several sockets at
// once); a caller that needs a barrier (one chain before the next,
// deletes after adds) calls apply once per group: it returns when the
// kernel has answered every write of it.
func (w writer) apply(cs []change, soft func(i int, refusal error) tc.Filter) ([]outcome, error) {
	out := make([]outcome, len(cs))
	ops := make([]tc.Op, len(cs))
	for i := range cs {
		f := &cs[i].f
		if cs[i].hw {
			f.Flags |= flagSkipSW
		}
		ops[i] = tc.Op{Kind: cs[i].kind, Filter: f}
	}
	errs, err := w.do(ops)
	if err != nil {
		return out, fmt.Errorf("flower: writing filters: %w", err)
	}
	var again []tc.Op
	var at []int
	for i, e := range errs {
		switch {
		case e == nil:
			out[i].inHW = cs[i].hw
		case cs[i].hw:
			if _, _, ok := refusal(e); !ok {
				out[i].err = e
				continue
			}
			out[i].refused = e
			f := soft(i, e)
			f.Flags &^= flagSkipSW
			again = append(again, tc.Op{Kind: cs[i].kind, Filter: &f})
			at = append(at, i)
		default:
			out[i].err = e
		}
	}
	if len(again) == 0 {
		return out, nil
	}
	errs, err = w.do(again)
	if err != nil {
		return out, fmt.Errorf("flower: writing filters: %w", err)
	}
	for j, e := range errs {
		if e != nil {
			out[at[j]].err = e
		}
	}
	return out, nil
}
