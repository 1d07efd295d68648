package scale

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/status"
)

// failures counts the simulated agents' failed sessions by cause, so that
// a run says why agents opened more sessions than they needed.
type failures struct {
	mu sync.Mutex
	m  map[string]int
}

var digits = regexp.MustCompile(`[0-9]+`)

// cause reduces a session's error to its kind: the step that failed, the
// gRPC code and the message with numbers (ports, addresses, sizes)
// folded, at most 160 characters.
func cause(err error) string {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Code().String() + ": " + msg
	}
	msg = digits.ReplaceAllString(msg, "N")
	if len(msg) > 160 {
		msg = msg[:160]
	}
	return msg
}

func (f *failures) add(err error) {
	c := cause(err)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int{}
	}
	f.m[c]++
}

// take returns the causes counted since the last take, the most frequent
// first ("none" when there were none), and starts counting again.
func (f *failures) take() string {
	f.mu.Lock()
	m := f.m
	f.m = nil
	f.mu.Unlock()
	if len(m) == 0 {
		return "none"
	}
	causes := make([]string, 0, len(m))
	for c := range m {
		causes = append(causes, c)
	}
	slices.SortFunc(causes, func(a, b string) int { return m[b] - m[a] })
	out := make([]string, len(causes))
	for i, c := range causes {
		out[i] = fmt.Sprintf("%d x %q", m[c], c)
	}
	return strings.Join(out, "; ")
}

// TakeFailures returns the agents' failed sessions by cause since the
// last call (see failures.take), every cause.
func (f *Fleet) TakeFailures() string { return f.fails.take() }

// loadAverage returns the machine's load average over 1, 5 and 15
// minutes, as /proc/loadavg gives it: every figure is recorded beside the
// load of the machine it was measured on (it is shared).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown: " + err.Error()
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " / ")
}
