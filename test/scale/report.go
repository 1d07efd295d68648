package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Report collects a run's figures.
type Report struct {
	mu      sync.Mutex
	Figures []Figure
	out     io.Writer
}

// Figure is one measured value.
type Figure struct {
	Scenario, What, Value string
}

// NewReport returns a report that also prints each figure to out (nil:
// silent) as it is measured.
func NewReport(out io.Writer) *Report { return &Report{out: out} }

// Add records a figure.
func (r *Report) Add(scenario, what, format string, args ...any) {
	f := Figure{scenario, what, fmt.Sprintf(format, args...)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Figures = append(r.Figures, f)
	if r.out != nil {
		fmt.Fprintf(r.out, "FIGURE %s | %s | %s\n", f.Scenario, f.What, f.Value)
	}
}

// Get returns the value of a figure ("" when absent).
func (r *Report) Get(scenario, what string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.Figures {
		if f.Scenario == scenario && f.What == what {
			return f.Value
		}
	}
	return ""
}

// Table writes the figures as a table.
func (r *Report) Table(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Figures {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Scenario, f.What, f.Value)
	}
	tw.Flush()
}

// Percentile returns the p-th percentile (0..100) of ds, nearest rank.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// secs formats a duration in seconds.
func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// mib formats bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// Profile saves one of the controller's Go profiles (kind: "profile" with
// seconds for CPU, "heap", "goroutine") to path.
func Profile(ctx context.Context, ct *Controller, kind string, seconds int, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/%s", ct.Metrics, kind)
	if seconds > 0 {
		url += fmt.Sprintf("?seconds=%d", seconds)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", kind, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("profile %s: %s: %s", kind, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
