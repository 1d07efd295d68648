package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/internal/dialer"
	"github.com/skiff-sdn/skiff/internal/tlsconf"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// dialController makes the channel to the controller replicas
// (internal/dialer: failover, capped reconnection backoff) with TLS as
// configured and keepalive.
func dialController(cfg Config, extra []grpc.DialOption) (*grpc.ClientConn, error) {
	creds, err := tlsconf.ClientReloading(tlsconf.ClientOptions{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey, ServerName: cfg.TLSServerName})
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true})}
	return dialer.Dial(cfg.Controller, append(opts, extra...)...)
}

// KeepaliveTime and KeepaliveTimeout: the agent's keepalive on its
// connection to the controller (dialer.KeepaliveTime, which says why).
const (
	KeepaliveTime    = dialer.KeepaliveTime
	KeepaliveTimeout = dialer.KeepaliveTimeout
)

// waitChannel waits until the connection to the controller is ready, for
// at most max: after a failed call the channel reconnects by itself (with
// the dialer's capped backoff), and the session goes on the moment it is
// ready instead of after a sleep of its own.
func (a *Agent) waitChannel(ctx context.Context, max time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for {
		st := a.conn.GetState()
		switch st {
		case connectivity.Ready:
			return
		case connectivity.Idle:
			a.conn.Connect()
		}
		if !a.conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// session keeps the node registered and its plan current until ctx ends,
// reconnecting with capped exponential backoff. Every plan it accepts goes
// to a.setPlan.
func (a *Agent) session(ctx context.Context) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := a.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		a.setConnected(false)
		if time.Since(start) > 10*time.Second {
			wait = 100 * time.Millisecond
		}
		if c := status.Code(err); c == codes.Unavailable || c == codes.DeadlineExceeded {
			// Not reached: wait for the channel's own reconnection.
			a.log.Warn("controller not reachable; waiting for it", "err", err)
			a.waitChannel(ctx, 10*time.Second)
			continue
		}
		a.log.Warn("controller session ended; retrying", "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(wait*2, dialer.MaxBackoff)
	}
}

// stream runs one session: register, then follow the plan stream.
func (a *Agent) stream(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := a.client.Register(rctx, &skiffv1.RegisterRequest{Node: a.nodeObject()})
	cancel()
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	have := a.current().Revision
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := a.client.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: a.cfg.Node, HaveRevision: have})
	if err != nil {
		return fmt.Errorf("open plan stream: %w", err)
	}
	a.log.Info("plan stream open", "controller", a.cfg.Controller, "haveRevision", have)
	// Connected once the controller has answered on the stream: opening
	// it only sent the request.
	connected := false
	for {
		u, err := s.Recv()
		if err == io.EOF {
			return errors.New("controller closed the plan stream")
		}
		if err != nil {
			if status.Code(err) == codes.Canceled && ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("plan stream: %w", err)
		}
		if err := a.accept(u); err != nil {
			// A plan we cannot use: start over from a snapshot.
			a.log.Error("rejecting plan update; asking for a snapshot", "err", err)
			a.forgetRevision()
			return err
		}
		if !connected {
			connected = true
			a.setConnected(true)
			a.kickPorts() // the controller may have missed reports while apart
			a.kickDPU()
		}
	}
}

// accept turns an update into the new current plan.
func (a *Agent) accept(u *skiffv1.PlanUpdate) error {
	cur := a.current()
	var next plan.Plan
	switch {
	case u.GetSnapshot() != nil:
		p, err := planpb.Plan(u.GetSnapshot())
		if err != nil {
			return err
		}
		if p.Node != a.cfg.Node {
			return fmt.Errorf("snapshot for node %q", p.Node)
		}
		next = p
		a.log.Info("plan snapshot", "revision", p.Revision, "networks", len(p.Networks), "local", len(p.Local), "remote", len(p.Remote))
	case u.GetDelta() != nil:
		d, err := planpb.Delta(u.GetDelta())
		if err != nil {
			return err
		}
		next = cur.CloneFor(d)                 // the maps d does not change stay shared
		if err := next.Follow(d); err != nil { // d kept in Recent: the datapath applies it alone
			return err
		}
		if d.Empty() {
			a.log.Info("plan in sync", "from", d.From, "revision", d.Revision)
			if d.From == d.Revision {
				return nil
			}
		}
		a.log.Debug("plan delta", "from", d.From, "revision", d.Revision, "items", d.Size())
	default:
		return errors.New("empty plan update")
	}
	a.setPlan(next, u.GetDelta(), true)
	return nil
}
