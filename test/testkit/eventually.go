package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Eventually calls cond until it reports ok and returns how long that
// took. It polls at once, then after 10 ms, doubling the pause up to
// 100 ms. When within has passed without ok it fails t with
// "WHAT: not within WITHIN: STATUS", status being what cond said last
// (each part left out when empty).
// cond runs on the test's goroutine: it may fail t itself (a process
// that died).
func Eventually(t testing.TB, what string, within time.Duration, cond func() (ok bool, status string)) time.Duration {
	t.Helper()
	start := time.Now()
	pause := 10 * time.Millisecond
	for {
		ok, status := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			msg := fmt.Sprintf("not within %v", within)
			if what != "" {
				msg = what + ": " + msg
			}
			if status != "" {
				msg += ": " + status
			}
			t.Fatal(msg)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// NoError makes a condition for Eventually of f: ok when f returns nil,
// its error the status otherwise.
func NoError(f func() error) func() (bool, string) {
	return func() (bool, string) {
		if err := f(); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
}
