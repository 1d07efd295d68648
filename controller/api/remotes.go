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
	if len(c.m)+len(p.Remote) > c.max {
		c.m = map[string]cachedRemote{}
	}
	return planpb.PlanPBWith(p, func(r plan.Remote) *skiffv1.RemoteEndpoint {
		if e, ok := c.m[r.Name]; ok && e.r.Equal(r) {
			return e.pb
		}
		pb := planpb.RemotePB(r)
		if len(c.m) < c.max {
			c.m[r.Name] = cachedRemote{r: r, pb: pb}
		}
		return pb
	})
}
