// Package kubelettest is a stand-in for the kubelet's side of the device
// plugin API (v1beta1), for tests: the Registration service on a unix
// socket, and, for each plugin that registers, the conversation the
// kubelet holds with it (GetDevicePluginOptions, then ListAndWatch, whose
// lists it records). Allocate and GetPreferredAllocation are called by the
// test through Plugin's client. The real kubelet is exercised by the
// real-cluster tests.
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet is the stand-in. Its methods are safe for concurrent use.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer

	t      testing.TB
	Dir    string // the device-plugins directory
	Socket string // Dir/kubelet.sock

	mu      sync.Mutex
	srv     *grpc.Server
	plugins []*Plugin
	regs    chan *Plugin
}

// Plugin is one registration and the conversation that followed it.
type Plugin struct {
	Request *pluginapi.RegisterRequest
	Options *pluginapi.DevicePluginOptions
	Client  pluginapi.DevicePluginClient

	conn   *grpc.ClientConn
	cancel context.CancelFunc
	lists  chan []*pluginapi.Device
	mu     sync.Mutex
	last   []*pluginapi.Device
	ended  error
}

// Start serves the Registration service on dir/kubelet.sock (dir is made
// when empty: a temporary directory of t). Everything stops at the end of
// the test.
func Start(t testing.TB, dir string) *Kubelet {
	t.Helper()
	if dir == "" {
		// Unix socket paths are short (108 bytes): t.TempDir() may be
		// too deep.
		d, err := os.MkdirTemp("", "kubelet")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		dir = d
	}
	k := &Kubelet{t: t, Dir: dir, Socket: filepath.Join(dir, "kubelet.sock"), regs: make(chan *Plugin, 16)}
	k.Restart()
	t.Cleanup(k.Stop)
	return k
}

// Restart does what a restarting kubelet does to the directory: it stops
// serving, removes every socket in it (the plugins' included) and serves
// the Registration service again on a new kubelet.sock.
func (k *Kubelet) Restart() {
	k.t.Helper()
	k.restart(true)
}

// Reopen replaces only kubelet.sock: the plugins' sockets stay.
func (k *Kubelet) Reopen() {
	k.t.Helper()
	k.restart(false)
}

func (k *Kubelet) restart(wipe bool) {
	k.t.Helper()
	k.Stop()
	ents, _ := os.ReadDir(k.Dir)
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 && (wipe || e.Name() == filepath.Base(k.Socket)) {
			_ = os.Remove(filepath.Join(k.Dir, e.Name()))
		}
	}
	l, err := net.Listen("unix", k.Socket)
	if err != nil {
		k.t.Fatalf("kubelettest: %v", err)
	}
	s := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(s, k)
	go func() { _ = s.Serve(l) }()
	k.mu.Lock()
	k.srv = s
	k.mu.Unlock()
}

// Stop stops serving and ends every plugin conversation.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	s, ps := k.srv, k.plugins
	k.srv, k.plugins = nil, nil
	k.mu.Unlock()
	if s != nil {
		s.Stop()
	}
	for _, p := range ps {
		p.cancel()
		_ = p.conn.Close()
	}
}

// Register implements the Registration service as the kubelet does: it
// checks the version, connects to the plugin's socket (relative to Dir),
// asks for its options and starts ListAndWatch.
func (k *Kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("kubelettest: version %q, want %q", r.Version, pluginapi.Version)
	}
	if strings.Contains(r.Endpoint, "/") {
		return nil, fmt.Errorf("kubelettest: endpoint %q is not a file name in %s", r.Endpoint, k.Dir)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.Dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	p := &Plugin{Request: r, Client: pluginapi.NewDevicePluginClient(conn), conn: conn, lists: make(chan []*pluginapi.Device, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
	defer ocancel()
	if p.Options, err = p.Client.GetDevicePluginOptions(octx, &pluginapi.Empty{}); err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("kubelettest: options of %s: %w", r.ResourceName, err)
	}
	stream, err := p.Client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("kubelettest: ListAndWatch of %s: %w", r.ResourceName, err)
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				p.mu.Lock()
				p.ended = err
				p.mu.Unlock()
				close(p.lists)
				return
			}
			p.mu.Lock()
			p.last = resp.Devices
			p.mu.Unlock()
			p.lists <- resp.Devices
		}
	}()
	k.mu.Lock()
	k.plugins = append(k.plugins, p)
	k.mu.Unlock()
	k.regs <- p
	return &pluginapi.Empty{}, nil
}

// WaitRegistration returns the next registration, failing the test after
// within.
func (k *Kubelet) WaitRegistration(within time.Duration) *Plugin {
	k.t.Helper()
	select {
	case p := <-k.regs:
		return p
	case <-time.After(within):
		k.t.Fatalf("kubelettest: no plugin registered within %v", within)
		return nil
	}
}

// Registrations returns the registrations not yet taken by
// WaitRegistration, without waiting.
func (k *Kubelet) Registrations() []*Plugin {
	var out []*Plugin
	for {
		select {
		case p := <-k.regs:
			out = append(out, p)
		default:
			return out
		}
	}
}

// Summary renders a device list as "id=Healthy" words sorted by ID, with
// "@numa" when a device has a NUMA node.
func Summary(ds []*pluginapi.Device) string {
	var out []string
	for _, d := range ds {
		s := d.ID + "=" + d.Health
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				s += fmt.Sprintf("@%d", n.ID)
			}
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// ErrEnded is returned by WaitList when the plugin ended ListAndWatch.
var ErrEnded = errors.New("kubelettest: ListAndWatch ended")

// WaitList waits for a list sent by the plugin for which ok holds and
// returns it; lists sent before that are skipped. It fails the test
// after within, saying what the last list was.
func (p *Plugin) WaitList(t testing.TB, within time.Duration, what string, ok func([]*pluginapi.Device) bool) []*pluginapi.Device {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, open := <-p.lists:
			if !open {
				p.mu.Lock()
				err := p.ended
				p.mu.Unlock()
				t.Fatalf("kubelettest: %s: ListAndWatch of %s ended: %v", what, p.Request.ResourceName, err)
			}
			if ok(l) {
				return l
			}
		case <-deadline:
			p.mu.Lock()
			last := p.last
			p.mu.Unlock()
			t.Fatalf("kubelettest: %s: not within %v; last list of %s: %s", what, within, p.Request.ResourceName, Summary(last))
			return nil
		}
	}
}

// Ended waits until ListAndWatch ends (the plugin stopped), for at most
// within, and reports whether it did.
func (p *Plugin) Ended(within time.Duration) bool {
	deadline := time.After(within)
	for {
		select {
		case _, open := <-p.lists:
			if !open {
				return true
			}
		case <-deadline:
			return false
		}
	}
}
