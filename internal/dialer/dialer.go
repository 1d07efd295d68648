// Package dialer connects an agent to the controller replicas named by one
// --controller value, and lets gRPC fail over between them.
//
// Accepted values:
//
//	host:port                  one address; a host name is resolved by DNS and every address it has is used
//	host1:port,host2:port,...  several replicas
//	dns:///name:port           every address DNS gives for name, resolved again when connections fail
//	dns://server:53/name:port  the same, asking the DNS server at server:53
//
// The connection uses gRPC's pick_first balancer over the replicas in a
// shuffled order (so agents spread over the replicas): it holds one
// connection, and when that connection is lost the next call connects to the
// first replica that answers. A plan stream broken by a lost replica is
// therefore resumed by the agent's session on another one, with the
// revision it holds.
//
// Its HTTP/2 flow-control windows are static (StreamWindow, ConnWindow):
// gRPC's dynamic windows cost a ping and a window update from the agent,
// and a ping acknowledgement from the controller, for nearly every plan
// delta.
//
//	conn, err := dialer.Dial("10.0.0.1:7400,10.0.0.2:7400", grpc.WithTransportCredentials(creds))
package dialer

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// serviceConfig picks pick_first with a shuffled address list.
const serviceConfig = `{"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": true}}]}`

// Target is a parsed --controller value.
type Target struct {
	// URI is what gRPC dials: the value itself for one address or a dns:
	// target, a name of the package's own resolver for a list.
	URI string
	// Addrs are the host:port addresses of a list (nil otherwise).
	Addrs []string
}

// Parse checks a --controller value and says how to dial it. Errors name
// the flag and the part at fault.
func Parse(value string) (Target, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return Target{}, errors.New("--controller: is required")
	}
	if strings.HasPrefix(v, "dns:") {
		u, err := url.Parse(v)
		if err != nil {
			return Target{}, fmt.Errorf("--controller: %q is not a dns: URI: %w", v, err)
		}
		name := strings.TrimPrefix(u.Path, "/")
		if u.Opaque != "" || name == "" {
			return Target{}, fmt.Errorf("--controller: %q: want dns:///name:port or dns://server:port/name:port", v)
		}
		if err := hostPort(name); err != nil {
			return Target{}, fmt.Errorf("--controller: %q: %w", v, err)
		}
		return Target{URI: v}, nil
	}
	if strings.Contains(v, "://") {
		return Target{}, fmt.Errorf("--controller: %q: only host:port, a comma-separated list of them, or dns:///name:port", v)
	}
	parts := strings.Split(v, ",")
	var addrs []string
	seen := map[string]bool{}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return Target{}, fmt.Errorf("--controller: address %d of %q is empty", i+1, v)
		}
		if err := hostPort(p); err != nil {
			return Target{}, fmt.Errorf("--controller: address %d (%q): %w", i+1, p, err)
		}
		if seen[p] {
			return Target{}, fmt.Errorf("--controller: address %q is given twice", p)
		}
		seen[p] = true
		addrs = append(addrs, p)
	}
	if len(addrs) == 1 {
		return Target{URI: addrs[0]}, nil
	}
	return Target{URI: nextScheme() + ":///controllers", Addrs: addrs}, nil
}

func hostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if port == "" {
		return errors.New("the port is empty")
	}
	return nil
}

// schemes makes each list's resolver scheme unique in the process (a
// process may dial several lists, as the scale harness does).
var schemes atomic.Uint64

func nextScheme() string { return fmt.Sprintf("skiff-controllers-%d", schemes.Add(1)) }

// MaxBackoff caps the wait between reconnections: an agent is back within
// about a second of its controller returning, where gRPC's default would
// let the wait grow to 2 minutes while a controller restarts. (A refused
// connection costs the controller's host a SYN and a reset; 5,000 agents
// at this pace are 5,000 of them a second, spread by the jitter.)
const MaxBackoff = time.Second

// connectBackoff paces reconnections (100 ms to MaxBackoff); the jitter
// spreads a whole cluster's reconnections.
//
// ConnectTimeout is how long one connection attempt (TCP, TLS handshake,
// the server's HTTP/2 preface) may take: gRPC's default. A controller
// that thousands of agents connect to at once (its start, its restart)
// answers every handshake late; with 5 s, attempts were dropped just
// before their answer and started over, each costing the controller
// another handshake: 5,000 agents failed 31,000 attempts
// (docs/perf-log/scale.md, run C). A replica that does not answer at
// all does not hold the agent that long: pick_first tries the next
// address after 250 ms while the first attempt goes on.
const ConnectTimeout = 20 * time.Second

var connectBackoff = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: MaxBackoff},
	MinConnectTimeout: ConnectTimeout,
}

// KeepaliveTime and KeepaliveTimeout are the agent's keepalive (gRPC's
// keepalive.ClientParameters, with PermitWithoutStream): an idle
// connection to the controller is pinged this often, and given up when a
// ping is not answered in time. A controller that vanished without
// closing its connections (its host or its pod's network gone first) is
// noticed within their sum; one that returns at the same address answers
// the next ping with a reset, so the agent is back within KeepaliveTime
// plus a reconnection. The controller allows pings this frequent (its
// keepalive enforcement). The scale harness's simulated agents use the
// same, so that the controller reads and answers their pings as it does
// real agents'.
const (
	KeepaliveTime    = 5 * time.Second
	KeepaliveTimeout = 3 * time.Second
)

// StreamWindow and ConnWindow are the HTTP/2 flow-control windows of the
// connection to the controller, static. gRPC's default (dynamic windows,
// grown by bandwidth-delay estimation) makes the client send a PING, and a
// connection WINDOW_UPDATE before it, on the first message after each
// estimate: a plan stream whose deltas come one per interval pings for
// nearly every delta, and the controller reads each ping and writes its
// acknowledgement (a TLS record and a write per delta and agent, on top of
// the delta's own). 4 MiB lets a snapshot of 30,000 plan items through in
// about one window; the window only bounds what may be in flight unread.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 8 << 20
)

// Dial parses value and returns a client connection (not yet connected:
// gRPC connects on the first call) with failover between the replicas.
// opts carry credentials and keepalive; Dial adds the resolver, the
// service config, the reconnection backoff and the static windows.
func Dial(value string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	t, err := Parse(value)
	if err != nil {
		return nil, err
	}
	opts = append(opts, grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithConnectParams(connectBackoff),
		grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow))
	if len(t.Addrs) > 0 {
		scheme, _, _ := strings.Cut(t.URI, ":")
		r := manual.NewBuilderWithScheme(scheme)
		var eps []resolver.Endpoint
		for _, a := range t.Addrs {
			host, _, _ := net.SplitHostPort(a)
			// ServerName: each replica's certificate is checked against
			// its own host, not the list's made-up authority.
			eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
		}
		r.InitialState(resolver.State{Endpoints: eps})
		opts = append(opts, grpc.WithResolvers(r))
	}
	conn, err := grpc.NewClient(t.URI, opts...)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", value, err)
	}
	return conn, nil
}
