package testkit

import (
	"net"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr returns 127.0.0.1:PORT with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: FreePort(t)}).String()
}
