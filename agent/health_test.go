package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/fake"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// probeGet asks the agent's probe handler for path.
func probeGet(t *testing.T, a *Agent, path string) (int, string) {
	t.Helper()
	mux := http.NewServeMux()
	a.healthHandlers(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, strings.TrimSpace(string(b))
}

// wantProbe waits until path answers code with a body holding words.
func wantProbe(t *testing.T, a *Agent, path string, code int, words string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%s answering %d and %q", path, code, words), 10*time.Second, func() (bool, string) {
		c, body := probeGet(t, a, path)
		return c == code && strings.Contains(body, words), fmt.Sprintf("%d %q", c, body)
	})
}

// TestHealthProbes walks the probes through the agent's states: no plan,
// connected and applied, a failing datapath, headless on the saved plan,
// and a stuck reconcile.
func TestHealthProbes(t *testing.T) {
	// No controller and no saved plan: live, not ready.
	dead := newFakeController(t, "n1")
	dead.stop()
	cfg := Config{Controller: dead.addr, Node: "n1", UnderlayIP: "192.0.2.1", StateDir: t.TempDir(), SysRoot: t.TempDir()}
	lonely, err := New(context.Background(), cfg, Deps{Datapath: fake.New(), Kernel: &fakeKernel{events: make(chan nl.Event)}})
	if err != nil {
		t.Fatal(err)
	}
	defer lonely.conn.Close()
	wantProbe(t, lonely, "/readyz", 503, "no plan yet")
	wantProbe(t, lonely, "/healthz", 503, "no plan yet")
	wantProbe(t, lonely, "/livez", 200, "ok")

	h := newHarness(t)
	wantProbe(t, h.a, "/readyz", 200, "ready: connected, plan revision 1 applied")
	wantProbe(t, h.a, "/healthz", 200, "ok")
	applied := func(held, applied int64) {
		t.Helper()
		if s := h.a.Status(); s.Revision != held || s.Applied != applied {
			t.Errorf("status %+v: want revision %d held, %d applied", s, held, applied)
		}
	}
	applied(1, 1)

	h.dp.FailApply(errors.New("bridge skb100: device busy"))
	h.ctl.addNetwork("blue", 100)
	wantProbe(t, h.a, "/readyz", 503, "datapath: bridge skb100: device busy")
	wantProbe(t, h.a, "/livez", 200, "ok")
	applied(2, 1) // the failed Apply's plan is held, not applied

	h.ctl.stop()
	h.a.resync()
	wantProbe(t, h.a, "/readyz", 200, "ready, headless: the last plan (revision 2) is applied")
	applied(2, 2)

	// A reconcile that does not return: live until stuckAfter.
	block := &blockingDatapath{Datapath: fake.New(), release: make(chan struct{})}
	ctl := newFakeController(t, "n1")
	cfg.Controller, cfg.StateDir = ctl.addr, t.TempDir()
	stuck, err := New(context.Background(), cfg, Deps{Datapath: block, Kernel: &fakeKernel{events: make(chan nl.Event)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = stuck.Run(ctx) }()
	defer func() { close(block.release); cancel(); <-done }()
	testkit.Eventually(t, "a reconcile started", 10*time.Second, func() (bool, string) {
		stuck.mu.Lock()
		defer stuck.mu.Unlock()
		return !stuck.hs.applyingSince.IsZero(), ""
	})
	wantProbe(t, stuck, "/readyz", 503, "the plan is not applied yet")
	if ok, _ := stuck.live(time.Now()); !ok {
		t.Error("not live while a reconcile has just started")
	}
	if ok, why := stuck.live(time.Now().Add(stuckAfter + time.Minute)); ok || !strings.Contains(why, "a datapath reconcile has run for") {
		t.Errorf("live with a reconcile stuck for %v: %v %q", stuckAfter+time.Minute, ok, why)
	}
	wantProbe(t, stuck, "/livez", 200, "ok")
}

// blockingDatapath's Apply waits until release is closed.
type blockingDatapath struct {
	*fake.Datapath
	release chan struct{}
}

func (b *blockingDatapath) Apply(p plan.Plan) error {
	<-b.release
	return b.Datapath.Apply(p)
}
