package rtnl

import (
	"errors"
	"fmt"
	"sync"
)

// SplitMin is the fewest requests per socket Split sends: below
// 2*SplitMin requests it sends them all over its first socket, in order.
// A goroutine and a socket of its own do not pay for less.
const SplitMin = 2 * Window

// Split carries out n requests independent of each other over the
// sockets cs at once, for kernels that handle requests of different
// sockets in parallel (tc filters of rtnl-unlocked classifiers: flower).
// The requests are cut into runs in order, one run per socket, each sent
// (Do) by a goroutine of its own, which also makes its requests: request
// i is req(i), called once, from that goroutine (so encoding runs in
// parallel too); req must be safe for concurrent use on different i.
// Within a run the order is kept; between runs it is not. It returns one
// entry per request as Do does: nil, or the kernel's refusal of that
// request. err joins the socket failures; the requests of a run that
// failed that were not answered carry that run's failure, those of the
// other runs their own answers. Each Conn is used by one goroutine only,
// so Split may be called with Conns that are not used elsewhere meanwhile.
func Split(cs []*Conn, n int, req func(i int) Request) (errs []error, err error) {
	runs := min(len(cs), n/SplitMin)
	if runs <= 1 {
		reqs := make([]Request, n)
		for i := range reqs {
			reqs[i] = req(i)
		}
		return cs[0].Do(reqs)
	}
	errs = make([]error, n)
	fails := make([]error, runs)
	var wg sync.WaitGroup
	for k := range runs {
		start, end := k*n/runs, (k+1)*n/runs
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]Request, end-start)
			for i := range reqs {
				reqs[i] = req(start + i)
			}
			es, err := cs[k].Do(reqs)
			copy(errs[start:end], es)
			if err != nil {
				fails[k] = fmt.Errorf("socket %d of %d: %w", k+1, runs, err)
			}
		}()
	}
	wg.Wait()
	return errs, errors.Join(fails...)
}
