package testkit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalTB records a Fatal instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(f)
}

// eventually runs Eventually on a fatalTB and returns the message it
// failed with ("" when it did not fail).
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) (msg string) {
	f := &fatalTB{TB: t}
	defer func() {
		if r := recover(); r != nil {
			if r != f {
				panic(r)
			}
			msg = f.msg
		}
	}()
	Eventually(f, what, within, cond)
	return ""
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	took := Eventually(t, "the third call", time.Second, func() (bool, string) { n++; return n == 3, "" })
	if n != 3 || took <= 0 || took > time.Second {
		t.Fatalf("%d calls in %v", n, took)
	}
}

func TestEventuallyFailsWithTheLastStatus(t *testing.T) {
	n := 0
	msg := eventually(t, "n at 1000", 50*time.Millisecond, func() (bool, string) { n++; return false, fmt.Sprintf("n is %d", n) })
	if want := fmt.Sprintf("n at 1000: not within 50ms: n is %d", n); msg != want {
		t.Fatalf("message %q after %d calls", msg, n)
	}
	if msg := eventually(t, "", 10*time.Millisecond, func() (bool, string) { return false, "" }); msg != "not within 10ms" {
		t.Fatalf("message %q", msg)
	}
}

func TestNoError(t *testing.T) {
	if ok, s := NoError(func() error { return errors.New("not yet") })(); ok || s != "not yet" {
		t.Fatalf("%v %q", ok, s)
	}
	if ok, s := NoError(func() error { return nil })(); !ok || s != "" {
		t.Fatalf("%v %q", ok, s)
	}
}

func TestFreePort(t *testing.T) {
	p := FreePort(t)
	if p <= 0 || p > 65535 {
		t.Fatalf("port %d", p)
	}
	if a := FreeAddr(t); !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("address %s", a)
	}
}
