package guest

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// TCPTransfer sends n bytes from a client in namespace from to a listener
// on ip:5201 in namespace to, and returns how many arrived.
func TCPTransfer(t testing.TB, from, to, ip string, n int) int {
	t.Helper()
	var l net.Listener
	InNetns(t, to, func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(ip, "5201"))
		return err
	})
	defer l.Close()
	got := make(chan int, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		k, _ := io.Copy(io.Discard, c)
		got <- int(k)
	}()
	var c net.Conn
	InNetns(t, from, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(ip, "5201"), 10*time.Second)
		return err
	})
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	return <-got
}

// SourceSeen connects over TCP from the namespace at path from to
// addr:8080, served in the namespace at path to, and returns the source
// address the server saw: what a NAT on the way made of the client's. An
// error when the connection was not made within 3 s. Works on the host
// too (root).
func SourceSeen(from, to, addr string) (string, error) {
	var l net.Listener
	if err := nl.InNetNS(to, func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(addr, "8080"))
		return err
	}); err != nil {
		return "", err
	}
	defer l.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			seen <- ""
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		c.Close()
		seen <- host
	}()
	var c net.Conn
	if err := nl.InNetNS(from, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addr, "8080"), 3*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	c.Close()
	return <-seen, nil
}

// Serve answers every TCP connection to port 8080 in the named
// namespace with name and the source address it saw, until the test
// ends: a server that says which backend a Service picked.
func Serve(t testing.TB, ns, name string) {
	t.Helper()
	var l net.Listener
	InNetns(t, ns, func() (err error) {
		l, err = net.Listen("tcp", ":8080")
		return err
	})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s %s\n", name, host)
			c.Close()
		}
	}()
}

// Ask connects over TCP from the named namespace to addr:port and
// returns a Serve answer's two words (server, source it saw), or an
// error when no answer came within 3 s.
func Ask(ns, addr, port string) (server, seen string, err error) {
	var b []byte
	err = nl.InNetNS("/run/netns/"+ns, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		b, err = io.ReadAll(c)
		return err
	})
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		return f[0], f[1], nil
	}
	if err == nil {
		err = fmt.Errorf("answer %q", b)
	}
	return "", "", err
}
