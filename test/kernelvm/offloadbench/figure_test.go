package offloadbench

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// figure prints one headline figure on a line of its own, as
// "offloadbench: NAME=VALUE", so that runs can be compared by a script
// (grep '^offloadbench: ').
func figure(name string, value any) {
	switch v := value.(type) {
	case time.Duration:
		value = strconv.FormatFloat(float64(v)/float64(time.Millisecond), 'f', 3, 64)
	case float64:
		value = strconv.FormatFloat(v, 'f', 3, 64)
	}
	fmt.Printf("offloadbench: %s=%v\n", name, value)
}

// rssKiB is this process's resident set (VmRSS), in KiB; 0 when unknown.
func rssKiB() int64 {
	rss, _, err := testkit.Memory(0)
	if err != nil {
		return 0
	}
	return rss
}

// changeRounds is how many times the change steps are repeated, after their
// first (timed and reported on its own), for their median.
const changeRounds = 20

// median is the middle of ds (the mean of the two middle ones for an
// even count); ds is sorted.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

// gcs is the number of garbage collections the process has completed
// (runtime.MemStats.NumGC): read around a timed step, outside it, it
// says whether a collection ran during the step.
func gcs() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}
