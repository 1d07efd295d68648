package offloadbench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// Traffic: servers in pod b (Go, in the test binary), clients in pod a.

type servers struct {
	streamed chan int64 // bytes received by each stream, at its end
}

func serve(t *testing.T, pod, ip string) *servers {
	t.Helper()
	s := &servers{streamed: make(chan int64, 1)}
	ls := map[int]net.Listener{}
	if err := testkit.InNetns(pod, func() error {
		for _, port := range []int{portStream, portConn, portShut} {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			ls[port] = l
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for port, l := range ls {
		t.Cleanup(func() { l.Close() })
		go func() {
			for c, err := l.Accept(); err == nil; c, err = l.Accept() {
				if port != portStream {
					c.Close()
					continue
				}
				go func() {
					n, _ := io.Copy(io.Discard, c)
					c.Close()
					s.streamed <- n
				}()
			}
		}()
	}
	return s
}

// dialOnce connects from pod to b's port once, with a 1 s timeout.
func dialOnce(t *testing.T, pod string, port int) error {
	t.Helper()
	return testkit.InNetns(pod, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(podIP["b"], strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// stream sends from a to b for d and returns the bits b received and the
// seconds from the first write to b's end of stream.
func stream(t *testing.T, n *node, d time.Duration) (float64, float64) {
	t.Helper()
	var c net.Conn
	if err := testkit.InNetns(n.pods["a"], func() error {
		var err error
		c, err = net.DialTimeout("tcp", net.JoinHostPort(podIP["b"], strconv.Itoa(portStream)), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("%s: stream: %v", n.ns, err)
	}
	defer c.Close()
	buf := make([]byte, 128<<10)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("%s: stream: %v", n.ns, err)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case got := <-n.srv.streamed:
		return float64(got) * 8, time.Since(start).Seconds()
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: stream: the server did not see the end", n.ns)
	}
	return 0, 0
}

// connect opens and resets connections from pod to b for d, one at a
// time, and returns how many and the seconds it took.
func connect(t *testing.T, pod string, d time.Duration) (int, float64) {
	t.Helper()
	n := 0
	var took time.Duration
	err := testkit.InNetns(pod, func() error {
		start := time.Now()
		defer func() { took = time.Since(start) }()
		for time.Since(start) < d {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(podIP["b"], strconv.Itoa(portConn)), 2*time.Second)
			if err != nil {
				return fmt.Errorf("connection %d: %w", n+1, err)
			}
			// RST on close: no TIME_WAIT, so ports do not run out.
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
			n++
		}
		return nil
	})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Logf("conntrack: %s", guest.Run(t, "/bin/cat", "/proc/sys/net/netfilter/nf_conntrack_count"))
		}
		t.Fatalf("%s: connections: %v", pod, err)
	}
	return n, took.Seconds()
}
