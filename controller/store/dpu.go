package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- DPU pairing and DPU reports ----
//
// A node in mode dpu-host names its DPU node (Node.dpu). The pairing is
// held under dpupair/DPU = HOST, written in the host's registration
// transaction, so that one DPU serves one host whatever the concurrency.
// A node some host names must register in mode dpu; a host may name a DPU
// that has not registered yet (its plan says so, and its CNI ADDs fail
// fast until it does). The DPU's agent reports its host's endpoints
// (dpuready/EP), deleted with the endpoint.

func (s *Store) dpuPairKey(dpu string) string { return s.k("dpupair", dpu) }
func (s *Store) dpuReadyKey(ep string) string { return s.k("dpuready", ep) }

// pairing is what a registration adds to its transaction for the DPU
// pairing: the comparisons that make its checks hold, and its writes.
type pairing struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

// checkPairing refuses a registration of n (replacing old, nil for a new
// node) that conflicts with a DPU pairing: n names a DPU another host
// holds, or one registered in another mode than dpu; or n is some host's
// DPU and registers in another mode.
func (s *Store) checkPairing(ctx context.Context, n, old *skiffv1.Node) (pairing, error) {
	var p pairing
	gets := []clientv3.Op{clientv3.OpGet(s.dpuPairKey(n.Name))}
	if n.Dpu != "" {
		gets = append(gets, clientv3.OpGet(s.nodeKey(n.Dpu)), clientv3.OpGet(s.dpuPairKey(n.Dpu)))
	}
	resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return p, fmt.Errorf("store: register node %q: DPU pairing: %w", n.Name, err)
	}
	var claimRev int64
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		claimRev = kvs[0].ModRevision
		if host := string(kvs[0].Value); n.Mode != "dpu" {
			return p, errorf(FailedPrecondition, "mode", "node %q is the DPU of host %q: it must register in mode dpu, not %q (or the host names another DPU first)", n.Name, host, n.Mode)
		}
	}
	p.cmps = append(p.cmps, modRev(s.dpuPairKey(n.Name), claimRev))
	if n.Dpu != "" {
		var dpuRev, pairRev int64
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			dpuRev = kvs[0].ModRevision
			d, err := unmarshal[skiffv1.Node](kvs[0].Value)
			if err != nil {
				return p, err
			}
			if d.Mode != "dpu" {
				return p, errorf(FailedPrecondition, "dpu", "node %q is registered in mode %q, not dpu: it cannot be the DPU of host %q", n.Dpu, d.Mode, n.Name)
			}
		}
		if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
			pairRev = kvs[0].ModRevision
			if host := string(kvs[0].Value); host != n.Name {
				return p, errorf(AlreadyExists, "dpu", "node %q is already the DPU of host %q; one DPU serves one host", n.Dpu, host)
			}
		}
		p.cmps = append(p.cmps, modRev(s.nodeKey(n.Dpu), dpuRev), modRev(s.dpuPairKey(n.Dpu), pairRev))
		p.ops = append(p.ops, clientv3.OpPut(s.dpuPairKey(n.Dpu), n.Name))
	}
	if old != nil && old.Dpu != "" && old.Dpu != n.Dpu {
		p.ops = append(p.ops, s.unpairOps(old)...)
	}
	return p, nil
}

// unpairOps releases the DPU host n holds, if it still holds it.
func (s *Store) unpairOps(n *skiffv1.Node) []clientv3.Op {
	if n.GetDpu() == "" {
		return nil
	}
	k := s.dpuPairKey(n.Dpu)
	return []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", n.Name)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)}
}

// HostOf returns the host whose DPU node dpu is ("" when none names it).
func (s *Store) HostOf(ctx context.Context, dpu string) (string, error) {
	resp, err := s.cli.Get(ctx, s.dpuPairKey(dpu))
	if err != nil {
		return "", fmt.Errorf("store: host of DPU %q: %w", dpu, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// SetDPUEndpoints records what the agent of DPU node dpu reports of its
// host's endpoints: a report per endpoint, replaced when it changed;
// endpoints of the host the reports do not list lose theirs. Reports
// about endpoints that are not its host's are dropped.
func (s *Store) SetDPUEndpoints(ctx context.Context, dpu string, reports []*skiffv1.DPUEndpointReport) error {
	host, err := s.HostOf(ctx, dpu)
	if err != nil || host == "" {
		return err
	}
	eps, err := s.ListEndpoints(ctx, "", host)
	if err != nil {
		return err
	}
	byName := map[string]*skiffv1.DPUEndpointReport{}
	for _, r := range reports {
		byName[r.GetEndpoint()] = r
	}
	resp, err := s.cli.Get(ctx, s.k("dpuready")+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("store: DPU reports: %w", err)
	}
	have := map[string][]byte{}
	for _, kv := range resp.Kvs {
		have[lastSeg(kv.Key)] = kv.Value
	}
	for _, e := range eps {
		want, reported := byName[e.Name]
		cur, exists := have[e.Name]
		var op clientv3.Op
		switch {
		case reported && exists && sameReport(cur, want):
			continue
		case reported:
			op = clientv3.OpPut(s.dpuReadyKey(e.Name), marshal(want))
		case exists:
			op = clientv3.OpDelete(s.dpuReadyKey(e.Name))
		default:
			continue
		}
		// Only while the endpoint is the one listed.
		if _, err := s.cli.Txn(ctx).If(modRev(s.epKey(e.Name), e.Revision)).Then(op).Commit(); err != nil {
			return fmt.Errorf("store: DPU report of endpoint %q: %w", e.Name, err)
		}
	}
	return nil
}

func sameReport(stored []byte, r *skiffv1.DPUEndpointReport) bool {
	cur, err := unmarshal[skiffv1.DPUEndpointReport](stored)
	return err == nil && proto.Equal(cur, r)
}

// timesOf returns the times kept per node under kind ("status": the
// nodes whose agent held a session at store revision rev, with the time
// each connected; "away": when each one's last session ended). A time
// that does not parse is zero (unknown).
func (s *Store) timesOf(ctx context.Context, kind string, rev int64) (map[string]time.Time, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(ctx, s.k(kind)+"/", opts...)
	if err != nil {
		return nil, fmt.Errorf("store: node %s at %d: %w", kind, rev, err)
	}
	out := map[string]time.Time{}
	for _, kv := range resp.Kvs {
		t, _ := time.Parse(time.RFC3339Nano, string(kv.Value))
		out[lastSeg(kv.Key)] = t
	}
	return out, nil
}
