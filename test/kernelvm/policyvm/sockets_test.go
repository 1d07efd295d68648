package policyvm

import (
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/policytruth"
)

// TestSCTPSockets: policytruth's ListenSCTP and DialSCTP on loopback, in
// the guest (the development kernel has no SCTP): associations with a
// listener, then a dial of the closed listener refused.
func TestSCTPSockets(t *testing.T) {
	guest.Require(t)
	l, err := policytruth.ListenSCTP("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := sctpPort(t, l)
	for range 3 {
		if err := policytruth.DialSCTP("127.0.0.1", port, 2*time.Second); err != nil {
			t.Fatalf("dial the listener: %v", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := policytruth.DialSCTP("127.0.0.1", port, 2*time.Second); err == nil {
		t.Fatal("dial a closed listener: no error")
	} else {
		t.Logf("closed listener: %v after %v", err, time.Since(start))
	}
}

// sctpPort is the port a listener bound to port 0 got.
func sctpPort(t *testing.T, l io.Closer) int {
	t.Helper()
	f, ok := l.(*os.File)
	if !ok {
		t.Fatalf("ListenSCTP returned a %T, not a socket file", l)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getsockname(int(fd)) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		t.Fatalf("getsockname: %T, want an IPv4 address", sa)
	}
	return in4.Port
}
