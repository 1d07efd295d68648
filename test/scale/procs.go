package scale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Binaries are the real programs a run starts, built from this checkout.
type Binaries struct {
	Controller, Agent, Etcd string
}

// Build builds skiff-controller, skiff-agent and scale-etcd into dir from
// the module that holds this package.
func Build(ctx context.Context, dir string) (Binaries, error) {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("find module root: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/skiff-controller", "./cmd/skiff-agent", "./test/scale/cmd/scale-etcd")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("build: %w\n%s", err, out)
	}
	return Binaries{Controller: filepath.Join(dir, "skiff-controller"), Agent: filepath.Join(dir, "skiff-agent"),
		Etcd: filepath.Join(dir, "scale-etcd")}, nil
}

// Proc is a started program whose output goes to a log file.
type Proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts bin with args; prefix, when given, runs it through another
// command (ip netns exec NS).
func Start(name, logPath string, prefix []string, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	argv := append(append(append([]string{}, prefix...), bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to end. Idempotent.
func (p *Proc) Kill() {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to 20 s, then kills.
func (p *Proc) Stop() {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.Kill()
	}
}

// Tail returns the last n lines of the log.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Usage is a process's resident memory and CPU time at one moment.
type Usage struct {
	At     time.Time
	RSS    int64         // bytes
	CPU    time.Duration // user + system
	Thread int
}

// ReadUsage reads /proc for pid.
func ReadUsage(pid int) (Usage, error) {
	u := Usage{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(stat[i+2:]))
	// utime and stime are fields 14 and 15 of the whole line (11 and 12 here).
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
	u.Thread, _ = strconv.Atoi(f[17])
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			u.RSS = kb * 1024
		}
	}
	return u, nil
}

// CPUPercent is the CPU used between a and b, in percent of one core.
func CPUPercent(a, b Usage) float64 {
	wall := b.At.Sub(a.At)
	if wall <= 0 {
		return 0
	}
	return 100 * float64(b.CPU-a.CPU) / float64(wall)
}

// freeAddr returns host:port with a port that was free a moment ago.
func freeAddr(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// RaiseFileLimit raises this process's open-file limit (soft and hard) to
// n when it is lower; the programs it starts inherit it. Raising the hard
// limit needs root; otherwise the soft limit goes to the hard one.
func RaiseFileLimit(n uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur >= n {
		return r.Cur, nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, r.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: r.Max, Max: r.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return r.Cur, err
		}
	}
	return want.Cur, nil
}
