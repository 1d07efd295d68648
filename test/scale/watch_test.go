package scale

import "testing"

// TestKernelLearned: what ip monitor prints about the kernel's own
// neighbour entries is told apart from the agent's (PERMANENT) entries.
func TestKernelLearned(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"198.18.0.2 dev eth0 lladdr 02:00:00:00:00:02 REACHABLE", true},
		{"Deleted 198.18.0.2 dev eth0 lladdr 02:00:00:00:00:02 STALE", true},
		{"Deleted 224.0.0.22 dev skb1000 lladdr 01:00:5e:00:00:16 NOARP", true},
		{"ff02::16 dev skb1000 lladdr 33:33:00:00:00:16 NOARP", true},
		{"198.51.100.7 dev skb1000 lladdr 02:00:00:00:00:07 PERMANENT", false},
		{"Deleted 198.51.100.7 dev skb1000 lladdr 02:00:00:00:00:07 NOARP", false},
		{"Deleted 198.51.100.0/24 dev skb1000 proto kernel scope link src 198.51.100.1", false},
	} {
		if got := kernelLearned(c.line); got != c.want {
			t.Errorf("kernelLearned(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}
