package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a process of the cluster: started in a namespace with nsenter
// (not ip netns exec, which remounts /sys and hides the cgroup hierarchy
// the kubelet needs), placed in one of the cluster's cgroups before it
// runs (so that everything it starts can be found and killed), its
// output appended to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// spec says how to start a proc.
type spec struct {
	name  string   // the log is dir/name.log
	dir   string   // where the log goes
	group string   // the cgroup (relative to the hierarchy) it joins, or ""
	enter []string // nsenter's namespace arguments; none: the test's own
	env   []string // added to the test's environment
	args  []string
}

// spawner forks every process of every cluster from one OS thread that
// never exits. A process started with Pdeathsig is killed when the thread
// that forked it ends, and the Go runtime ends threads: a goroutine that
// exits while locked to one (netns helpers do, when they cannot switch a
// thread back) takes its thread with it. Forked from here, the cluster's
// processes die with the test process and not before.
var spawner struct {
	once sync.Once
	ch   chan func()
}

func spawn(f func()) {
	spawner.once.Do(func() {
		spawner.ch = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner.ch {
				f()
			}
		}()
	})
	done := make(chan struct{})
	spawner.ch <- func() { f(); close(done) }
	<-done
}

// start starts the process described by s.
func start(s spec) (*proc, error) {
	log := filepath.Join(s.dir, s.name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "==== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(s.args, " "))
	args := s.args
	if len(s.enter) > 0 {
		args = append(append(append([]string{"nsenter"}, s.enter...), "--"), args...)
	}
	if s.group != "" {
		// The shell joins the cgroup, then becomes the process: nothing
		// it starts can run outside the cgroup.
		args = append([]string{"/bin/sh", "-c", `echo $$ >"$0" && exec "$@"`, procsFile(s.group)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), s.env...)
	// Its own process group (a stop reaches what it started too), and
	// killed if the test process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawn(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("cluster: starting %s: %w", s.name, err)
	}
	p := &proc{name: s.name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// pid is the process's id (nil-safe: 0).
func (p *proc) pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited reports whether the process has ended (a nil proc has).
func (p *proc) exited() bool {
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// kill sends SIGKILL to the process group and waits.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// wait waits for the process to end, at most within.
func (p *proc) wait(within time.Duration) bool {
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	case <-time.After(within):
		return false
	}
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail(n int) string {
	if p == nil {
		return ""
	}
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
