package guest

import (
	"io"
	"net"
	"testing"
	"time"
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
