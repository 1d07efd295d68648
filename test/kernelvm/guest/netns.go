package guest

import (
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// InNetns runs fn on a thread in the named namespace (testkit.InNetns)
// and fails t with fn's error: sockets made there stay there. fn runs on
// another goroutine: it returns its error rather than failing t.
func InNetns(t testing.TB, name string, fn func() error) {
	t.Helper()
	if err := testkit.InNetns(name, fn); err != nil {
		t.Fatal(err)
	}
}
