package scale

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFailuresByCause: sessions failing for the same reason on different
// ports and nodes' numbers count as one cause, the most frequent first.
func TestFailuresByCause(t *testing.T) {
	var f failures
	if got := f.take(); got != "none" {
		t.Fatalf("no failures: %q", got)
	}
	for i := range 3 {
		f.add(fmt.Errorf("plan stream: %w", status.Errorf(codes.Unavailable, "error reading from server: read tcp 127.0.0.1:%d: connection reset", 40000+i)))
	}
	f.add(errors.New("the controller ended the plan stream"))
	got := f.take()
	want := `3 x "Unavailable: plan stream: rpc error: code = Unavailable desc = error reading from server: read tcp N.N.N.N:N: connection reset"; 1 x "the controller ended the plan stream"`
	if got != want {
		t.Errorf("causes:\n got %s\nwant %s", got, want)
	}
	if got := f.take(); got != "none" {
		t.Errorf("take did not start counting again: %q", got)
	}
	if got := cause(errors.New(strings.Repeat("x", 300))); len(got) != 160 {
		t.Errorf("a long cause is %d characters, want 160", len(got))
	}
}
