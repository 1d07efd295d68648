package api

import (
	"sync"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// remoteCache converts each remote endpoint to protobuf once for every
// snapshot that holds it: on a network that spans every node, each of N
// snapshots holds almost every endpoint of the cluster. The messages are
// shared between snapshots and only read (marshalled, which is safe
// concurrently). Safe for concurrent use.
type remoteCache struct {
	mu  sync.Mutex
	max int // entries; the cache starts over past it
	m   map[string]cachedRemote
}

type cachedRemote struct {
	r  plan.Remote
	pb *skiffv1.RemoteEndpoint
}

func newRemoteCache(max int) *remoteCache {
	return &remoteCache{max: max, m: map[string]cachedRemote{}}
}

// planPB is planpb.PlanPB with the remote endpoints from the cache.
func (c *remoteCache) planPB(p plan.Plan) *skiffv1.Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room(len(p.Remote))
	return planpb.PlanPBWith(p, c.remote)
}

// deltaPB is planpb.DeltaPB with the remote endpoints from the cache: a
// change to an endpoint of a network of N nodes is converted once for the
// N deltas that carry it. A full cache is not started over for a delta
// (its few items would not fill it); their records replace their own.
func (c *remoteCache) deltaPB(d plan.Delta) *skiffv1.PlanDelta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return planpb.DeltaPBWith(d, c.remote)
}

// room starts the cache over when n more entries might not fit. Caller
// holds mu.
func (c *remoteCache) room(n int) {
	if len(c.m)+n > c.max {
		c.m = map[string]cachedRemote{}
	}
}

// remote converts r, or returns the message converted before for the same
// record. Caller holds mu.
func (c *remoteCache) remote(r plan.Remote) *skiffv1.RemoteEndpoint {
	if e, ok := c.m[r.Name]; ok && e.r.Equal(r) {
		return e.pb
	}
	pb := planpb.RemotePB(r)
	if _, ok := c.m[r.Name]; ok || len(c.m) < c.max {
		c.m[r.Name] = cachedRemote{r: r, pb: pb} // a replaced record: the next deltas carry this one
	}
	return pb
}
