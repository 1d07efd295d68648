package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Require fails the test unless it runs as root.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces); run `make test` as root")
	}
}

// New creates a namespace named skt-<random> and deletes it when the test
// ends. It returns the name; its path is Path(name).
func New(t testing.TB) string {
	t.Helper()
	Require(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "skt-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	Run(t, name, "ip", "link", "set", "lo", "up")
	return name
}

// Path returns the filesystem path of the named namespace: where
// iproute2 binds it, /run/netns (the host's /var/run is a link to /run;
// the kernel VM guest's is a directory of its own).
func Path(name string) string { return "/run/netns/" + name }

// Tools are the programs the helpers that act in a namespace run: ip
// (iproute2, for ip netns exec) and ping. Host is the host's; the kernel
// VM guest has its own (guest.Tools: full paths, since busybox's applets
// shadow PATH there).
type Tools struct {
	IPCmd   string
	PingCmd string
}

// Host is the host's tools, found on PATH.
var Host = Tools{IPCmd: "ip", PingCmd: "ping"}

// Try runs a command inside namespace ns and returns its output and error.
func (x Tools) Try(ns string, args ...string) (string, error) {
	out, err := exec.Command(x.IPCmd, append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// Run runs a command inside namespace ns and returns its output; it fails
// the test when the command fails.
func (x Tools) Run(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := x.Try(ns, args...)
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// Ping sends count echo requests from namespace ns to addr (IPv4 or
// IPv6), waiting up to wait (whole seconds) for each reply, and returns
// an error with ping's output when ping fails (no reply came).
func (x Tools) Ping(ns, addr string, count int, wait time.Duration) error {
	args := []string{x.PingCmd}
	if strings.Contains(addr, ":") {
		args = append(args, "-6")
	}
	args = append(args, "-c", strconv.Itoa(count), "-W", strconv.Itoa(int(wait/time.Second)), addr)
	if out, err := x.Try(ns, args...); err != nil {
		return fmt.Errorf("ping %s -> %s: %w\n%s", ns, addr, err, out)
	}
	return nil
}

// MustPing is Ping that fails the test when ping fails.
func (x Tools) MustPing(t testing.TB, ns, addr string, count int, wait time.Duration) {
	t.Helper()
	if err := x.Ping(ns, addr, count, wait); err != nil {
		t.Fatal(err)
	}
}

// Try runs a command inside namespace ns with the host's tools.
func Try(ns string, args ...string) (string, error) { return Host.Try(ns, args...) }

// Run runs a command inside namespace ns with the host's tools, failing
// the test when it fails.
func Run(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return Host.Run(t, ns, args...)
}

// Ping is Host.Ping.
func Ping(ns, addr string, count int, wait time.Duration) error {
	return Host.Ping(ns, addr, count, wait)
}

// MustPing is Host.MustPing.
func MustPing(t testing.TB, ns, addr string, count int, wait time.Duration) {
	t.Helper()
	Host.MustPing(t, ns, addr, count, wait)
}

// JSON runs a command inside ns (iproute2 with -j) and decodes its output.
func JSON(t testing.TB, ns string, v any, args ...string) {
	t.Helper()
	out := Run(t, ns, args...)
	if strings.TrimSpace(out) == "" {
		out = "[]"
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("in %s: %s: decode: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
}
