package guest

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is an output buffer safe for a process writing and a test
// reading.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *Buffer) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Daemon is a project binary running (in a namespace) until stopped.
type Daemon struct {
	Cmd  *exec.Cmd
	Out  *Buffer
	done chan struct{}
}

// StartIn starts the project binary name (guest.Bin) with args in the
// named network namespace (the guest's root namespace when ns is ""). At
// cleanup it gets SIGTERM and the tail of its output is logged.
func StartIn(t *testing.T, ns, name string, args ...string) *Daemon {
	t.Helper()
	argv := append([]string{Bin(t, name)}, args...)
	if ns != "" {
		argv = append([]string{IP, "netns", "exec", ns}, argv...)
	}
	d := &Daemon{Cmd: exec.Command(argv[0], argv[1:]...), Out: &Buffer{}, done: make(chan struct{})}
	d.Cmd.Stdout, d.Cmd.Stderr = d.Out, d.Out
	if err := d.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = d.Cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.Signal(syscall.SIGTERM)
		t.Logf("---- %s %s ----\n%s", ns, strings.Join(argv, " "), Tail(d.Out.String(), 60))
	})
	return d
}

// Signal sends sig and waits for the process to end (SIGKILL after 10 s).
func (d *Daemon) Signal(sig syscall.Signal) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.Cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.Cmd.Process.Kill()
		<-d.done
	}
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
