package guest

import (
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// InNetns runs fn on a thread in the named namespace (nl.InNetNS; the
// guest's /var/run is not /run, and ip netns binds under /run/netns) and
// fails t with fn's error: sockets made there stay there. fn runs on
// another goroutine: it returns its error rather than failing t.
func InNetns(t testing.TB, name string, fn func() error) {
	t.Helper()
	if err := nl.InNetNS("/run/netns/"+name, fn); err != nil {
		t.Fatal(err)
	}
}
