package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/datapath/fake"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestDeleteWhileControllerAway: a local delete with the controller down
// removes the interface at once and succeeds; the controller-side delete
// is recorded on disk, survives an agent restart, and is finished when
// the controller returns. A create of the same endpoint meanwhile finishes
// it first.
func TestDeleteWhileControllerAway(t *testing.T) {
	h := newHarness(t)
	h.ctl.addNetwork("blue", 100)
	for _, n := range []string{"pod-a", "pod-b"} {
		if _, err := h.create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	addr := h.ctl.addr
	h.ctl.stop()

	start := time.Now()
	for _, n := range []string{"pod-a", "pod-b"} {
		if err := h.a.Delete(context.Background(), localapi.DeleteRequest{Name: n}); err != nil {
			t.Fatalf("delete %s with the controller away: %v", n, err)
		}
	}
	if took := time.Since(start); took > 2*deleteWait {
		t.Errorf("the deletes took %v", took)
	}
	if p := h.dp.Plumbed(); len(p) != 0 {
		t.Errorf("still plumbed: %v", p)
	}
	if got := h.a.Pending(); !slices.Equal(got, []string{"pod-a", "pod-b"}) {
		t.Fatalf("pending: %v", got)
	}
	b, err := os.ReadFile(filepath.Join(h.state, pendingFile))
	if err != nil || !strings.Contains(string(b), `"pod-a"`) || !strings.Contains(string(b), `"pod-b"`) {
		t.Fatalf("pending deletes on disk: %s %v", b, err)
	}
	// Deleting again is still fine (idempotent) and records nothing new.
	if err := h.a.Delete(context.Background(), localapi.DeleteRequest{Name: "pod-a"}); err != nil {
		t.Fatal(err)
	}

	// The agent restarts while the controller is still away.
	h.stopAgent()
	h.startAgent(fake.New())
	if got := h.a.Pending(); !slices.Equal(got, []string{"pod-a", "pod-b"}) {
		t.Fatalf("pending after restart: %v", got)
	}
	// The controller still holds both: their addresses stay allocated.
	if got := h.ctl.endpoints(); len(got) != 2 {
		t.Fatalf("the controller holds %v before it returns", got)
	}

	// It returns: a create of pod-a (the same container again) finishes
	// pod-a's delete before it creates, or finds it finished by the loop
	// (whichever comes first, the new pod-a must stay); pod-b's is
	// finished by the loop.
	streams := h.ctl.streamsSeen()
	h.ctl.start(t, addr)
	h.waitConnected(streams)
	if _, err := h.create(context.Background(), "pod-a"); err != nil {
		t.Fatalf("create of an endpoint whose delete was pending: %v", err)
	}
	testkit.Eventually(t, "the pending deletes finished", 10*time.Second, func() (bool, string) {
		p := h.a.Pending()
		return len(p) == 0, fmt.Sprintf("pending: %v", p)
	})
	if got := h.ctl.endpoints(); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("the controller holds %v, want the new pod-a only", got)
	}
	if _, err := os.Stat(filepath.Join(h.state, pendingFile)); !os.IsNotExist(err) {
		t.Errorf("pending file left: %v", err)
	}
}
