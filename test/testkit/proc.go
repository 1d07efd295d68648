package testkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident set now (VmRSS) and at its peak
// (VmHWM), in KiB, from /proc/<pid>/status; pid 0 is the caller.
func Memory(pid int) (rssKiB, peakKiB int64, err error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	var found int
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || (f[0] != "VmRSS:" && f[0] != "VmHWM:") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("memory of process %d: %s %w", pid, f[0], err)
		}
		found++
		if f[0] == "VmRSS:" {
			rssKiB = n
		} else {
			peakKiB = n
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("memory of process %d: %s has no VmRSS or VmHWM", pid, path)
	}
	return rssKiB, peakKiB, nil
}
