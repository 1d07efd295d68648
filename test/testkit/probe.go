package testkit

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// InNetns runs fn on a thread in the named namespace: sockets made there
// stay there.
func InNetns(ns string, fn func() error) error { return nl.InNetNS(Path(ns), fn) }

// Serve answers every TCP connection to addr (host:port; an empty host
// is every address) in namespace ns with "NAME SOURCE\n", its name and
// the client's address as it saw it (what a NAT on the way made of it),
// until the test ends: a server that says which backend a Service picked.
func Serve(t testing.TB, ns, addr, name string) {
	t.Helper()
	l, err := listen(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go answer(l, name, -1)
}

// Ask connects over TCP from namespace ns to addr (host:port) and returns
// the two words of a Serve answer: the server's name and the source
// address it saw. An error when no answer came within within.
func Ask(ns, addr string, within time.Duration) (server, seen string, err error) {
	b, err := read(ns, addr, within)
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		return f[0], f[1], nil
	}
	if err == nil {
		err = fmt.Errorf("answer %q", b)
	}
	return "", "", fmt.Errorf("from %s to %s: %w", ns, addr, err)
}

// Connects reports whether a TCP connection from namespace ns to addr is
// answered (by Serve, or any server that says something and hangs up)
// within within.
func Connects(ns, addr string, within time.Duration) bool {
	b, err := read(ns, addr, within)
	return err == nil && len(b) > 0
}

// read connects over TCP from namespace ns to addr and reads what the
// server says until it hangs up, all within within.
func read(ns, addr string, within time.Duration) ([]byte, error) {
	var b []byte
	err := InNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, within)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(within))
		b, err = io.ReadAll(c)
		return err
	})
	return b, err
}

// SourceSeen serves one connection on addr:8080 in namespace to, connects
// to it from namespace from and returns the source address the server
// saw. An error when the connection was not answered within 3 s.
func SourceSeen(from, to, addr string) (string, error) {
	hp := net.JoinHostPort(addr, "8080")
	l, err := listen(to, hp)
	if err != nil {
		return "", err
	}
	defer l.Close()
	go answer(l, "seen", 1)
	_, seen, err := Ask(from, hp, 3*time.Second)
	return seen, err
}

// listen opens a TCP listener on addr in namespace ns.
func listen(ns, addr string) (net.Listener, error) {
	var l net.Listener
	if err := InNetns(ns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, ns, err)
	}
	return l, nil
}

// answer answers n connections to l (all with n < 0) as Serve says, until
// l is closed.
func answer(l net.Listener, name string, n int) {
	for ; n != 0; n-- {
		c, err := l.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		fmt.Fprintf(c, "%s %s\n", name, host)
		c.Close()
	}
}
