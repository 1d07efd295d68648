// Command probe is the traffic tool of the test pod image
// (skiff.local/testpod): echo servers, one-shot probes whose exit status
// says whether the peer answered, and counted flows.
//
//	probe serve --tcp 8080 --udp 8081      echo on TCP and UDP ports until SIGTERM
//	probe tcp 198.51.100.7:8080 [--timeout 1s]   exit 0 when the peer echoes, 1 otherwise
//	probe udp 198.51.100.7:8081 [--timeout 1s]
//	probe flow --udp 198.51.100.7:8081 --interval 10ms --duration 10s
//	probe flow --tcp 198.51.100.7:8080 --interval 10ms --duration 10s
//
// flow sends numbered messages and prints, at the end, one line:
//
//	sent=1000 received=1000 lost=0 errors=0 max_gap=12ms
//
// (lost: UDP messages never echoed; errors: TCP connections that failed
// and were dialled again; max_gap: the longest time without an echo).
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "tcp", "udp":
		err = once(os.Args[1], os.Args[2:])
	case "flow":
		err = flow(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe serve [--tcp PORT]... [--udp PORT]... | probe tcp|udp HOST:PORT [--timeout D] | probe flow --tcp|--udp HOST:PORT [--interval D] [--duration D]")
	os.Exit(2)
}

type ports []int

func (p *ports) String() string { return fmt.Sprint(*p) }
func (p *ports) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > 65535 {
		return fmt.Errorf("port %q: must be 1-65535", s)
	}
	*p = append(*p, v)
	return nil
}

// serve echoes on every port given until SIGTERM or SIGINT.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var tcp, udp ports
	fs.Var(&tcp, "tcp", "a TCP port to echo on (repeatable)")
	fs.Var(&udp, "udp", "a UDP port to echo on (repeatable)")
	_ = fs.Parse(args)
	if len(tcp)+len(udp) == 0 {
		return errors.New("serve: give at least one --tcp or --udp port")
	}
	for _, p := range tcp {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			return err
		}
		go echoTCP(l)
		fmt.Println("serving tcp", p)
	}
	for _, p := range udp {
		c, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		if err != nil {
			return err
		}
		go echoUDP(c)
		fmt.Println("serving udp", p)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	return nil
}

// echoTCP echoes every connection accepted on l until l is closed.
func echoTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

// echoUDP echoes every datagram c receives until c is closed.
func echoUDP(c net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteTo(buf[:n], from)
	}
}

// once sends one message and waits for its echo.
func once(proto string, args []string) error {
	if len(args) < 1 {
		usage()
	}
	fs := flag.NewFlagSet(proto, flag.ExitOnError)
	timeout := fs.Duration("timeout", time.Second, "how long to wait for the echo")
	_ = fs.Parse(args[1:])
	if err := probeOnce(proto, args[0], *timeout); err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}

// probeOnce sends one message to addr and waits for its echo.
func probeOnce(proto, addr string, timeout time.Duration) error {
	c, err := net.DialTimeout(proto, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	msg := []byte("probe\n")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("%s %s: no echo: %w", proto, addr, err)
	}
	return nil
}

// flow sends a numbered message every interval for duration and counts
// the echoes.
func flow(args []string) error {
	fs := flag.NewFlagSet("flow", flag.ExitOnError)
	tcp := fs.String("tcp", "", "HOST:PORT of a TCP echo server")
	udp := fs.String("udp", "", "HOST:PORT of a UDP echo server")
	interval := fs.Duration("interval", 10*time.Millisecond, "time between messages")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	_ = fs.Parse(args)
	if (*tcp == "") == (*udp == "") || *interval <= 0 || *duration <= 0 {
		return errors.New("flow: give one of --tcp or --udp, and a positive --interval and --duration")
	}
	proto, addr := "udp", *udp
	if *tcp != "" {
		proto, addr = "tcp", *tcp
	}
	fmt.Println(runFlow(proto, addr, *interval, *duration))
	return nil
}

// flowResult is what a flow counted.
type flowResult struct {
	sent, received, errors int
	maxGap                 time.Duration
}

func (r flowResult) String() string {
	return fmt.Sprintf("sent=%d received=%d lost=%d errors=%d max_gap=%dms", r.sent, r.received, r.sent-r.received, r.errors, r.maxGap.Milliseconds())
}

// runFlow sends a numbered message every interval for duration and
// counts the echoes.
func runFlow(proto, addr string, interval, duration time.Duration) flowResult {
	var (
		mu       sync.Mutex
		got      = map[uint64]bool{}
		last     = time.Now()
		maxGap   time.Duration
		errCount int
	)
	echoed := func(seq uint64) {
		mu.Lock()
		defer mu.Unlock()
		if got[seq] {
			return
		}
		got[seq] = true
		if gap := time.Since(last); gap > maxGap {
			maxGap = gap
		}
		last = time.Now()
	}
	var conn net.Conn
	dial := func() {
		if conn != nil {
			conn.Close()
		}
		c, err := net.DialTimeout(proto, addr, interval*10+time.Second)
		if err != nil {
			conn = nil
			return
		}
		conn = c
		go func() {
			r := bufio.NewReader(c)
			buf := make([]byte, 8)
			for {
				if _, err := io.ReadFull(r, buf); err != nil {
					return
				}
				echoed(binary.BigEndian.Uint64(buf))
			}
		}()
	}
	dial()
	var sent uint64
	end := time.Now().Add(duration)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for now := range tick.C {
		if now.After(end) {
			break
		}
		if conn == nil {
			mu.Lock()
			errCount++
			mu.Unlock()
			dial()
			continue
		}
		sent++
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], sent)
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(b[:]); err != nil && proto == "tcp" {
			mu.Lock()
			errCount++
			mu.Unlock()
			dial()
		}
	}
	time.Sleep(500 * time.Millisecond) // the last echoes
	if conn != nil {
		conn.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := time.Since(last) - 500*time.Millisecond; gap > maxGap {
		maxGap = gap
	}
	return flowResult{sent: int(sent), received: len(got), errors: errCount, maxGap: maxGap}
}
