package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/skiff-sdn/skiff/internal/atomicfile"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Deletes the controller has not confirmed yet.
//
// A local delete (a CNI DEL) never waits for the controller: the agent
// removes the interface at once, and when the controller cannot be
// reached it records the controller-side delete in its state directory
// (pending.json, written atomically) and answers success. The record is
// finished when the controller answers again, by a loop woken when the
// plan stream reconnects, and survives agent restarts.
//
// The endpoint's addresses stay allocated to it in the controller's store
// until the delete is finished there, so no address can be handed to
// another pod (on this node or any other) while it is pending: nothing is
// double-allocated, and nothing is freed twice (a retried delete of an
// endpoint already gone is NOT_FOUND, which finishes the record). A create
// of an endpoint of the same name on this node (a runtime retrying the
// sandbox of the same container) finishes the pending delete first.

const pendingFile = "pending.json"

// pendingDelete is one recorded delete.
type pendingDelete struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

// unreachable reports whether a controller error means it was not reached
// (or did not answer), so that the delete may be finished later.
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// loadPending reads the recorded deletes; a missing file is none.
func loadPending(dir string) (map[string]pendingDelete, error) {
	out := map[string]pendingDelete{}
	b, err := os.ReadFile(filepath.Join(dir, pendingFile))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: read pending deletes: %w", err)
	}
	var list []pendingDelete
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("agent: %s is corrupt: %w", filepath.Join(dir, pendingFile), err)
	}
	for _, p := range list {
		out[p.Name] = p
	}
	return out, nil
}

// writePending saves the recorded deletes atomically; none removes the
// file. Caller holds pendMu.
func (a *Agent) writePending() error {
	path := filepath.Join(a.cfg.StateDir, pendingFile)
	if len(a.pend) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent: pending deletes: %w", err)
		}
		return nil
	}
	var list []pendingDelete
	for _, k := range slices.Sorted(maps.Keys(a.pend)) {
		list = append(list, a.pend[k])
	}
	b, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("agent: pending deletes: %w", err)
	}
	if err := atomicfile.Write(a.cfg.StateDir, pendingFile, b); err != nil {
		return fmt.Errorf("agent: pending deletes: %w", err)
	}
	return nil
}

// addPending records a delete to finish later.
func (a *Agent) addPending(name string) error {
	a.pendMu.Lock()
	defer a.pendMu.Unlock()
	if _, ok := a.pend[name]; ok {
		return nil
	}
	a.pend[name] = pendingDelete{Name: name, Since: time.Now().UTC()}
	if err := a.writePending(); err != nil {
		delete(a.pend, name)
		return err
	}
	a.pendingGauge.Set(float64(len(a.pend)))
	a.kickPending()
	return nil
}

func (a *Agent) dropPending(name string) {
	a.pendMu.Lock()
	defer a.pendMu.Unlock()
	if _, ok := a.pend[name]; !ok {
		return
	}
	delete(a.pend, name)
	if err := a.writePending(); err != nil {
		a.log.Error("pending deletes", "err", err)
	}
	a.pendingGauge.Set(float64(len(a.pend)))
}

// isPending reports whether a delete of name waits for the controller.
func (a *Agent) isPending(name string) bool {
	a.pendMu.Lock()
	defer a.pendMu.Unlock()
	_, ok := a.pend[name]
	return ok
}

// Pending lists the deletes that wait for the controller, sorted.
func (a *Agent) Pending() []string {
	a.pendMu.Lock()
	defer a.pendMu.Unlock()
	return slices.Sorted(maps.Keys(a.pend))
}

func (a *Agent) kickPending() {
	select {
	case a.pendSig <- struct{}{}:
	default:
	}
}

// finishPending deletes name at the controller; done is true when the
// record is finished (deleted, or already gone).
func (a *Agent) finishPending(ctx context.Context, name string) (done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = a.client.DeleteEndpoint(ctx, &skiffv1.DeleteRequest{Name: name})
	if err == nil || status.Code(err) == codes.NotFound {
		a.dropPending(name)
		a.log.Info("pending delete finished at the controller", "endpoint", name)
		a.resync()
		return true, nil
	}
	return false, err
}

// pendingLoop finishes recorded deletes: when one is added, when the plan
// stream (re)connects, and otherwise with a backoff from 1 s to 30 s while
// some are left.
func (a *Agent) pendingLoop(ctx context.Context) {
	wait := time.Second
	for {
		var retry <-chan time.Time
		if len(a.Pending()) > 0 {
			retry = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.pendSig:
			wait = time.Second
		case <-retry:
			wait = min(2*wait, 30*time.Second)
		}
		for _, name := range a.Pending() {
			// Never while a create is under way: one of an endpoint of
			// the same name finishes its delete itself, and the new
			// endpoint must not be deleted by a late retry.
			a.pendOp.Lock()
			done, err := true, error(nil)
			if a.isPending(name) {
				done, err = a.finishPending(ctx, name)
			}
			a.pendOp.Unlock()
			if !done {
				if ctx.Err() != nil {
					return
				}
				a.log.Info("pending delete not finished yet", "endpoint", name, "err", err)
				break // the controller is still away: the rest waits too
			}
		}
	}
}
