package flower

import (
	"fmt"
	"testing"
)

// TestAppendPadded: sortPolicy's keys sort as fmt's %010d and %05d did.
func TestAppendPadded(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
	}{{0, 10}, {3, 10}, {4294967295, 10}, {21264, 5}, {7, 5}, {123456, 5}} {
		if got, want := string(appendPadded(nil, c.v, c.width)), fmt.Sprintf("%0*d", c.width, c.v); got != want {
			t.Errorf("appendPadded(%d, %d) = %q, want %q", c.v, c.width, got, want)
		}
	}
}
