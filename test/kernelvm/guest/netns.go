package guest

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNetns runs fn on a thread in the named namespace: sockets made there
// stay there. The thread goes back to the caller's namespace before it is
// released.
func InNetns(t testing.TB, name string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // this thread must not run anything else
		}
	}()
	fn()
}
