package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/fake"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// These tests run the agent's own behaviour (session, resume, saved plan,
// local API create and delete with rollback, events, counters) against
// the fake datapath, a fake kernel and a fake controller on loopback:
// no root needed.

// fakeKernel is the agent's Kernel: fixed links, events sent by the test.
type fakeKernel struct {
	events chan nl.Event
}

func (k *fakeKernel) Links() ([]nl.Link, error) { return []nl.Link{{Index: 1, Name: "lo"}}, nil }

func (k *fakeKernel) Watch(ctx context.Context, fn func(nl.Event)) error {
	for {
		select {
		case e := <-k.events:
			fn(e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type harness struct {
	t      *testing.T
	ctl    *fakeController
	dp     *fake.Datapath
	kern   *fakeKernel
	a      *Agent
	state  string
	netns  string // a file standing for a pod's namespace
	cancel context.CancelFunc
	done   chan struct{}
}

func newHarness(t *testing.T, kinds ...string) *harness {
	h := &harness{t: t, ctl: newFakeController(t, "n1"), state: t.TempDir()}
	h.netns = filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(h.netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.startAgent(fake.New(kinds...))
	return h
}

// startAgent runs an agent on dp with the harness's state directory.
func (h *harness) startAgent(dp *fake.Datapath) {
	h.t.Helper()
	h.dp, h.kern = dp, &fakeKernel{events: make(chan nl.Event, 16)}
	cfg := Config{Controller: h.ctl.addr, Node: "n1", UnderlayIP: "192.0.2.1", StateDir: h.state, Mode: ModeSoftware,
		StatsInterval: 50 * time.Millisecond, SysRoot: h.t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, Deps{Datapath: dp, Mode: ModeSoftware, Kernel: h.kern})
	if err != nil {
		h.t.Fatal(err)
	}
	h.a, h.cancel, h.done = a, cancel, make(chan struct{})
	go func() { defer close(h.done); _ = a.Run(ctx) }()
	h.t.Cleanup(h.stopAgent)
}

func (h *harness) stopAgent() {
	h.cancel()
	<-h.done
}

// waitState waits until the fake datapath holds want.
func (h *harness) waitState(what, want string) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := h.dp.State()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: the datapath holds\n%s\nwant\n%s", what, got, want)
		}
		select {
		case <-h.dp.NextApply():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h *harness) create(ctx context.Context, name string) (*localapi.CreateResponse, error) {
	return h.a.Create(ctx, localapi.CreateRequest{Name: name, Network: "blue", NetNS: h.netns, IfName: "eth0", Labels: map[string]string{"app": name}})
}

// TestAgentTransitions walks the agent through a pod's life against the
// fake datapath; after every step the state the datapath would hold is
// compared whole.
func TestAgentTransitions(t *testing.T) {
	h := newHarness(t)
	const blue = "network blue vni=100 mtu=1450 flood=[]\n"
	steps := []struct {
		name string
		do   func(t *testing.T) error
		code string // the local API error code wanted ("" for success)
		want string // the datapath's state after the step
	}{
		{"snapshot applied", func(*testing.T) error { return nil }, "", ""},
		{"network created", func(*testing.T) error { h.ctl.addNetwork("blue", 100); return nil }, "", blue},
		{"pod-a created", func(t *testing.T) error {
			r, err := h.create(context.Background(), "pod-a")
			if err == nil && (r.HostIf != "fkpod-a" || r.MTU != 1450 || !slices.Equal(r.Gateways, []string{"198.51.100.1"}) || len(r.IPs) != 1) {
				t.Errorf("pod-a: response %+v", r)
			}
			return err
		}, "", blue + "endpoint pod-a plumbed=eth0@" + h.netns + " host=fkpod-a attached\n"},
		{"pod-b: plumbing fails, rolled back", func(*testing.T) error {
			h.dp.FailPlumb("pod-b", errors.New("no VF left"))
			_, err := h.create(context.Background(), "pod-b")
			return err
		}, localapi.CodeFailed, blue + "endpoint pod-a plumbed=eth0@" + h.netns + " host=fkpod-a attached\n"},
		{"pod-c: never attached, rolled back at the deadline", func(*testing.T) error {
			h.dp.Stick("pod-c", "representor missing")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := h.create(ctx, "pod-c")
			h.dp.Stick("pod-c", "")
			return err
		}, localapi.CodeFailed, blue + "endpoint pod-a plumbed=eth0@" + h.netns + " host=fkpod-a attached\n"},
		{"pod-a exists", func(*testing.T) error { _, err := h.create(context.Background(), "pod-a"); return err },
			localapi.CodeExists, blue + "endpoint pod-a plumbed=eth0@" + h.netns + " host=fkpod-a attached\n"},
		{"unknown network", func(*testing.T) error {
			_, err := h.a.Create(context.Background(), localapi.CreateRequest{Name: "pod-d", Network: "red", NetNS: h.netns, IfName: "eth0"})
			return err
		}, localapi.CodeNotFound, blue + "endpoint pod-a plumbed=eth0@" + h.netns + " host=fkpod-a attached\n"},
		{"pod-a deleted", func(*testing.T) error { return h.a.Delete(context.Background(), localapi.DeleteRequest{Name: "pod-a"}) }, "", blue},
		{"pod-a deleted again", func(*testing.T) error { return h.a.Delete(context.Background(), localapi.DeleteRequest{Name: "pod-a"}) }, "", blue},
	}
	for _, s := range steps {
		err := s.do(t)
		var le *localapi.Error
		switch {
		case s.code == "" && err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case s.code != "" && (!errors.As(err, &le) || le.Code != s.code):
			t.Fatalf("%s: error %v, want code %s", s.name, err, s.code)
		}
		h.waitState(s.name, s.want)
		if got := h.ctl.endpoints(); len(got) > 1 || (len(got) == 1 && !strings.Contains(s.want, "endpoint "+got[0]+" ")) {
			t.Fatalf("%s: the controller holds endpoints %v", s.name, got)
		}
	}
	// Rollbacks unplumbed what they had plumbed.
	if p := h.dp.Plumbed(); len(p) != 0 {
		t.Fatalf("plumbed after the last delete: %v", p)
	}
}

// TestAgentRefusesKindsItsDatapathLacks: a VF on a datapath that plumbs
// veths only is refused before anything is created.
func TestAgentRefusesKindsItsDatapathLacks(t *testing.T) {
	h := newHarness(t)
	h.ctl.addNetwork("blue", 100)
	vf := 0
	_, err := h.a.Create(context.Background(), localapi.CreateRequest{Name: "vm", Network: "blue", NetNS: h.netns, IfName: "eth0", PF: "eth1", VF: &vf})
	var le *localapi.Error
	if !errors.As(err, &le) || le.Code != localapi.CodeInvalid || !strings.Contains(le.Message, "kind vf") {
		t.Fatalf("VF on a veth-only datapath: %v", err)
	}
	if got := h.ctl.endpoints(); len(got) != 0 {
		t.Fatalf("the controller holds %v", got)
	}
}

// TestAgentRestartAndResume: a restarted agent applies its saved plan
// before the controller answers, and resumes the stream with a delta from
// that plan's revision; a lost stream resumes with a delta too.
func TestAgentRestartAndResume(t *testing.T) {
	h := newHarness(t)
	h.ctl.addNetwork("blue", 100)
	if _, err := h.create(context.Background(), "pod-a"); err != nil {
		t.Fatal(err)
	}
	before := h.dp.State()
	h.stopAgent()
	rev := h.a.current().Revision

	// The controller is away while the agent restarts.
	addr := h.ctl.addr
	h.ctl.stop()
	dp := fake.New()
	dp.Plumb(context.Background(), datapath.PlumbRequest{Endpoint: h.a.current().Local["pod-a"], NetNS: h.netns, IfName: "eth0"})
	h.startAgent(dp)
	h.waitState("saved plan applied with the controller away", before)
	if p, _ := dp.Applied(); p.Revision != rev {
		t.Fatalf("restarted agent applied revision %d, saved %d", p.Revision, rev)
	}
	if s := h.a.Status(); s.Ready || s.Connected {
		t.Fatalf("status with the controller away: %+v", s)
	}

	// The controller returns: one stream, resumed from rev, with a delta.
	streams := h.ctl.streamsSeen()
	h.ctl.start(t, addr)
	h.waitConnected(streams)
	h.ctl.mu.Lock()
	haves, sent := slices.Clone(h.ctl.haves), slices.Clone(h.ctl.sent)
	h.ctl.mu.Unlock()
	if haves[len(haves)-1] != rev || !slices.Contains(sent, "delta "+itoa(int(rev))+"->"+itoa(int(rev))) {
		t.Fatalf("after restart the stream opened with %v, the controller sent %v; want a resume from %d", haves, sent, rev)
	}
	if got := h.dp.State(); got != before {
		t.Fatalf("the resumed agent changed the datapath:\n%s\nwas\n%s", got, before)
	}

	// A change while connected arrives as a delta; a dropped stream
	// resumes from it.
	h.ctl.addNetwork("red", 200)
	h.waitState("red pushed", "network blue vni=100 mtu=1450 flood=[]\nnetwork red vni=200 mtu=1450 flood=[]\nendpoint pod-a plumbed=eth0@"+h.netns+" host=fkpod-a attached\n")
	streams = h.ctl.streamsSeen()
	h.ctl.stop()
	h.ctl.start(t, addr)
	h.waitConnected(streams)
	h.ctl.mu.Lock()
	last := h.ctl.sent[len(h.ctl.sent)-1]
	h.ctl.mu.Unlock()
	if !strings.HasPrefix(last, "delta ") {
		t.Fatalf("after a dropped stream the controller sent %q, want a delta", last)
	}
}

// waitConnected waits until the controller has seen more than streams plan
// streams and the agent is ready on the newest (the agent drops its old
// stream, so it is not ready, before it opens a new one).
func (h *harness) waitConnected(streams int) {
	h.t.Helper()
	testkit.Eventually(h.t, "the agent back on a new stream", 10*time.Second, func() (bool, string) {
		s := h.a.Status()
		return h.ctl.streamsSeen() > streams && s.Ready, fmt.Sprintf("%+v", s)
	})
}

// TestAgentReportsEventsAndCounters: a new link becomes an event at the
// controller; an endpoint's counters are reported from the datapath's.
func TestAgentReportsEventsAndCounters(t *testing.T) {
	h := newHarness(t)
	h.ctl.addNetwork("blue", 100)
	if _, err := h.create(context.Background(), "pod-a"); err != nil {
		t.Fatal(err)
	}
	h.dp.SetCounters("pod-a", datapath.IfCounters{RxPackets: 7, TxPackets: 9})
	h.kern.events <- nl.Event{Kind: "link", Index: 9, Name: "eth9"}
	testkit.Eventually(t, "the event and the counters reported", 10*time.Second, func() (bool, string) {
		h.ctl.mu.Lock()
		defer h.ctl.mu.Unlock()
		var gotEvent, gotCounters bool
		for _, e := range h.ctl.events {
			gotEvent = gotEvent || (e.GetKind() == "link-added" && e.GetSubject() == "eth9")
		}
		for _, r := range h.ctl.counters {
			for _, e := range r.GetEndpoints() {
				gotCounters = gotCounters || (e.GetEndpoint() == "pod-a" && e.GetCounters().GetRxPackets() == 7 && e.GetCounters().GetTxPackets() == 9)
			}
		}
		return gotEvent && gotCounters, fmt.Sprintf("event reported %v, counters reported %v", gotEvent, gotCounters)
	})
}
