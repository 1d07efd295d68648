package nl_test

import (
	"sync"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestDeleteByNameRace: a link deleted by someone else between
// DeleteByName's lookup and its delete is gone, which is what was asked:
// success, not "no such device". The kernel does that to a pod's veth
// when the runtime deletes the pod's namespace before CNI DEL (it then
// passes no namespace): the node's end goes with the pod's, in a
// workqueue, in its own time (an e2e churn run of 10 concurrent DELs
// failed a pod's DEL that way). Here four deleters race for each link,
// so every round but the winner's loses it after finding it, or finds
// nothing.
func TestDeleteByNameRace(t *testing.T) {
	node := testkit.New(t)
	// A handle each, as separate CNI processes have.
	var ks [4]nl.Kernel
	for j := range ks {
		ks[j] = open(t, node)
	}
	for i := range 100 {
		testkit.Run(t, node, "ip", "link", "add", "skdelrace", "type", "veth", "peer", "name", "skdelpeer")
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 4)
		for _, k := range ks {
			wg.Go(func() {
				<-start
				if err := nl.DeleteByName(k, "skdelrace"); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", i, err)
		}
		if out, err := testkit.Try(node, "ip", "link", "show", "skdelrace"); err == nil {
			t.Fatalf("round %d: skdelrace still there:\n%s", i, out)
		}
	}
}
