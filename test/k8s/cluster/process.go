package cluster

import (
	"fmt"
	"os"
	"time"
)

// Process is a long-running program a test started on a node with
// Node.Start (a device plugin, an agent run by hand). Its methods are
// safe for concurrent use.
type Process struct{ p *proc }

// Start starts a program in the node's network and mount namespaces and
// in the node's cgroup (so Stop and PowerOff end it with the node's own
// programs, and a dead test process's cluster is reaped with it), its
// output appended to LogFile(name). It runs until the test stops it, the
// node powers off or the cluster stops. Not safe for concurrent use
// (like the cluster's other starts and stops).
func (n *Node) Start(name string, args ...string) (*Process, error) {
	if n.holder.exited() {
		return nil, fmt.Errorf("cluster: node %s: its namespace holder is gone", n.Name)
	}
	p, err := n.run(name, args...)
	if err != nil {
		return nil, err
	}
	n.c.procs = append(n.c.procs, p)
	return &Process{p: p}, nil
}

// Stop sends SIGTERM to the process (and what it started), SIGKILL after
// grace, and waits for it to end. Idempotent.
func (p *Process) Stop(grace time.Duration) { p.p.stop(grace) }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { return p.p.exited() }

// Wait waits at most within for the process to end, and reports whether
// it did and with what (nil: exit status 0).
func (p *Process) Wait(within time.Duration) (bool, error) {
	if !p.p.wait(within) {
		return false, nil
	}
	return true, p.p.err
}

// Pid is the program's process id (the shell that joins the cgroup and
// nsenter exec into it).
func (p *Process) Pid() int { return p.p.pid() }

// Log is the process's output so far (with the "==== start" lines of
// every program that wrote to the same log).
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.p.log)
	return string(b)
}
