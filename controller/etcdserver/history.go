package etcdserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"
)

// historyBatch is how many revisions History reads from the backend under
// one read lock.
const historyBatch = 4096

// History calls fn with every change of a key under prefix in revisions
// from..to, oldest first, read from the member's backend in one pass (its
// key bucket is ordered by revision): the cost is linear in the revisions
// read, where a watch that starts in the past rereads the history from its
// position at each of etcd's sync rounds. An event carries the key's
// previous version (PrevKv) when the key existed before it, as a watch with
// WithPrevKV does. It returns the first revision read: from, or the
// compaction revision when the history before it is gone. It changes
// nothing and is safe for concurrent use.
func (s *Server) History(ctx context.Context, prefix string, from, to int64, fn func(*clientv3.Event) error) (int64, error) {
	kv := s.e.Server.KV()
	rd := kv.Read(mvcc.ConcurrentReadTxMode, traceutil.TODO())
	first := rd.FirstRev()
	rd.End()
	from = max(from, first, 1)
	last := map[string]*mvccpb.KeyValue{} // latest version seen, per key
	be := s.e.Server.Backend()
	for lo := from; lo <= to; lo += historyBatch {
		if err := ctx.Err(); err != nil {
			return from, err
		}
		hi := min(lo+historyBatch, to+1)
		evs, err := readRevisions(be.ReadTx(), prefix, lo, hi)
		if err != nil {
			return from, err
		}
		for _, ev := range evs {
			k := string(ev.Kv.Key)
			if prev, ok := last[k]; ok {
				ev.PrevKv = prev
			} else if ev.Type == mvccpb.DELETE || ev.Kv.Version > 1 {
				prev, err := previous(ctx, kv, ev.Kv.Key, ev.Kv.ModRevision-1, from)
				if err != nil {
					return from, err
				}
				ev.PrevKv = prev
			}
			if ev.Type == mvccpb.DELETE {
				delete(last, k)
			} else {
				last[k] = ev.Kv
			}
			if err := fn(ev); err != nil {
				return from, err
			}
		}
	}
	return from, nil
}

// readRevisions returns the events under prefix of revisions lo..hi-1.
func readRevisions(tx backend.ReadTx, prefix string, lo, hi int64) ([]*clientv3.Event, error) {
	start := mvcc.RevToBytes(mvcc.Revision{Main: lo}, mvcc.NewRevBytes())
	end := mvcc.RevToBytes(mvcc.Revision{Main: hi}, mvcc.NewRevBytes())
	tx.RLock()
	defer tx.RUnlock()
	revs, vals := tx.UnsafeRange(schema.Key, start, end, 0)
	var out []*clientv3.Event
	for i, v := range vals {
		kv := &mvccpb.KeyValue{}
		// Unmarshal copies: the values are the backend's memory.
		if err := proto.Unmarshal(v, kv); err != nil {
			return nil, fmt.Errorf("etcdserver: history: revision %d: %w", mvcc.BytesToRev(revs[i]).Main, err)
		}
		if !bytes.HasPrefix(kv.Key, []byte(prefix)) {
			continue
		}
		ev := &clientv3.Event{Type: mvccpb.PUT, Kv: kv}
		if mvcc.IsTombstone(revs[i]) {
			ev.Type = mvccpb.DELETE
			kv.ModRevision = mvcc.BytesToRev(revs[i]).Main
		}
		out = append(out, ev)
	}
	return out, nil
}

// previous returns key's version at revision at, or nil when it did not
// exist or that revision is before the first one kept (from).
func previous(ctx context.Context, kv mvcc.KV, key []byte, at, from int64) (*mvccpb.KeyValue, error) {
	if at < from {
		return nil, nil
	}
	r, err := kv.Range(ctx, key, nil, mvcc.RangeOptions{Rev: at})
	if errors.Is(err, mvcc.ErrCompacted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("etcdserver: history: %s at %d: %w", key, at, err)
	}
	if len(r.KVs) == 0 {
		return nil, nil
	}
	return r.KVs[0], nil
}
