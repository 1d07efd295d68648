package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// tb lets the demo use the test cluster's helpers (test/k8s/cluster,
// test/k8s/skiff), which take a testing.TB, from a plain program: logs go
// to stdout, a fatal error ends the demo's goroutine (its deferred
// functions run), and cleanups run once, last registered first, when the
// demo ends or is interrupted.
type tb struct {
	testing.TB // never set: the methods the helpers use are all below

	ctx    context.Context
	mu     sync.Mutex
	failed bool
	clean  []func()
	once   sync.Once
}

func newTB(ctx context.Context) *tb { return &tb{ctx: ctx} }

func (t *tb) Helper()                  {}
func (t *tb) Name() string             { return "demo-k8s" }
func (t *tb) Context() context.Context { return t.ctx }
func (t *tb) Log(args ...any)          { t.print("   ", fmt.Sprint(args...)) }
func (t *tb) Logf(f string, args ...any) {
	t.print("   ", fmt.Sprintf(f, args...))
}
func (t *tb) Error(args ...any)         { t.error(fmt.Sprint(args...)) }
func (t *tb) Errorf(f string, a ...any) { t.error(fmt.Sprintf(f, a...)) }
func (t *tb) Fatal(args ...any)         { t.Error(args...); t.FailNow() }
func (t *tb) Fatalf(f string, a ...any) { t.Errorf(f, a...); t.FailNow() }
func (t *tb) Skip(args ...any)          { t.Fatal(append([]any{"skipped: "}, args...)...) }
func (t *tb) Skipf(f string, a ...any)  { t.Fatalf("skipped: "+f, a...) }
func (t *tb) SkipNow()                  { t.FailNow() }
func (t *tb) Skipped() bool             { return false }

// error reports a failure, silently once interrupted (see Failed).
func (t *tb) error(s string) {
	if t.ctx.Err() == nil {
		t.print("ERROR: ", s)
	}
	t.Fail()
}

func (t *tb) Fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

// FailNow ends the calling goroutine, as testing.T's does: call it only
// from the demo's own goroutine.
func (t *tb) FailNow() {
	t.Fail()
	runtime.Goexit()
}

// Failed reports a failure, but not once the demo is interrupted: what
// an interrupted step reports (kubectl killed by the same Ctrl-C) is no
// failure, and the teardown prints no diagnostics for it.
func (t *tb) Failed() bool {
	if t.ctx.Err() != nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	t.clean = append(t.clean, f)
	t.mu.Unlock()
}

func (t *tb) TempDir() string {
	d, err := os.MkdirTemp("", "skiff-demo-k8s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// cleanup runs the cleanups once; a second caller waits for the first.
func (t *tb) cleanup() {
	t.once.Do(func() {
		for {
			t.mu.Lock()
			if len(t.clean) == 0 {
				t.mu.Unlock()
				return
			}
			f := t.clean[len(t.clean)-1]
			t.clean = t.clean[:len(t.clean)-1]
			t.mu.Unlock()
			f()
		}
	})
}

func (t *tb) print(prefix, s string) {
	fmt.Println(prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix))
}
