package offloadbench

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
)

// started is about when this process started: the change steps log
// their time since it, to be read beside GODEBUG=gctrace=1's lines
// ("gc N @SECONDSs ...", also since the start), which TestMain turns on.
var started = time.Now()

func TestMain(m *testing.M) {
	// The test binary runs again with GODEBUG=gctrace=1 (the VM passes
	// no environment of ours; the runtime reads it only at start): every
	// collection is printed with its start and phases, so a collection
	// running during a timed change (NumGC counts only completed ones)
	// can be seen.
	if !strings.Contains(os.Getenv("GODEBUG"), "gctrace=1") {
		env := append(os.Environ(), "GODEBUG=gctrace=1")
		if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
			fmt.Fprintln(os.Stderr, "offloadbench: running again with gctrace:", err)
		}
	}
	os.Exit(m.Run())
}

// phaseFigures prints the parts of dp's last Apply (offload.Phases) as
// NAME_phase_PART_ms figures and returns them on one line.
func phaseFigures(name string, dp *offload.Datapath) string {
	var b strings.Builder
	for _, ph := range dp.Phases() {
		figure(name+"_phase_"+ph.Name+"_ms", ph.Took)
		fmt.Fprintf(&b, " %s=%.3f", ph.Name, float64(ph.Took)/float64(time.Millisecond))
	}
	return strings.TrimSpace(b.String())
}

// phaseTimes collects the parts of many Applies of each kind, for their
// medians.
type phaseTimes map[string]*parts

type parts struct {
	order []string
	times map[string][]time.Duration
}

func (pt phaseTimes) add(name string, dp *offload.Datapath) {
	ps := pt[name]
	if ps == nil {
		ps = &parts{times: map[string][]time.Duration{}}
		pt[name] = ps
	}
	for _, ph := range dp.Phases() {
		if _, ok := ps.times[ph.Name]; !ok {
			ps.order = append(ps.order, ph.Name)
		}
		ps.times[ph.Name] = append(ps.times[ph.Name], ph.Took)
	}
}

// report prints NAME_p50_phase_PART_ms for every part of name's Applies
// and logs them on one line.
func (pt phaseTimes) report(t *testing.T, name string) {
	t.Helper()
	ps := pt[name]
	if ps == nil {
		t.Fatalf("no Apply of %s was measured", name)
	}
	var b strings.Builder
	for _, n := range ps.order {
		m := median(ps.times[n])
		figure(name+"_p50_phase_"+n+"_ms", m)
		fmt.Fprintf(&b, " %s=%.3f", n, float64(m)/float64(time.Millisecond))
	}
	t.Logf("FIGURE %s, median of each part:%s", name, b.String())
}
