package agent

import (
	"fmt"
	"net/http"
	"time"
)

// Health, for a DaemonSet's probes (served on --metrics-addr):
//
//   - /livez (liveness) fails only when restarting the agent could help:
//     a reconcile stuck for longer than stuckAfter (a kernel call that
//     does not return). An absent controller is not a reason: the datapath
//     keeps forwarding on the plan it has.
//   - /readyz (readiness) holds when the node's datapath matches a plan:
//     one was applied without error, from the controller or, with the
//     controller away, the last one it sent (headless). The body says
//     which.
//   - /healthz is /readyz with the body "ok" when ready (as before /readyz
//     existed), and fails on a stuck reconcile too.
//
// Each answers 200, or 503 with why not.

// stuckAfter is how long one reconcile may run before the agent counts as
// not live.
const stuckAfter = 2 * time.Minute

// health is what the probes read, kept by the reconcile loop.
type health struct {
	applyingSince time.Time // zero when no reconcile runs
	applied       bool      // a reconcile has finished (with or without error)
}

// live says whether the agent works, and why not.
func (a *Agent) live(now time.Time) (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.hs.applyingSince; !s.IsZero() && now.Sub(s) > stuckAfter {
		return false, fmt.Sprintf("a datapath reconcile has run for %s", now.Sub(s).Round(time.Second))
	}
	return true, "ok"
}

// ready says whether the datapath matches a plan, and how the agent runs.
func (a *Agent) ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.hasPlan:
		return false, "no plan yet: the controller " + a.cfg.Controller + " has not answered and no plan was saved"
	case !a.hs.applied:
		return false, "the plan is not applied yet"
	case a.healthy != nil:
		return false, "datapath: " + a.healthy.Error()
	case !a.isConnected:
		return true, fmt.Sprintf("ready, headless: the last plan (revision %d) is applied; the controller %s is not connected", a.plan.Revision, a.cfg.Controller)
	}
	return true, fmt.Sprintf("ready: connected, plan revision %d applied", a.plan.Revision)
}

func probe(w http.ResponseWriter, ok bool, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, why)
}

// healthHandlers adds /livez, /readyz and /healthz to mux.
func (a *Agent) healthHandlers(mux *http.ServeMux) {
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := a.live(time.Now())
		probe(w, ok, why)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := a.ready()
		probe(w, ok, why)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.live(time.Now()); !ok {
			probe(w, ok, why)
			return
		}
		ok, why := a.ready()
		if ok {
			why = "ok"
		}
		probe(w, ok, why)
	})
}
