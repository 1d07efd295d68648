package offloadbench

import (
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestFirstChangeElsewhere is the control of TestScale's first changes:
// the same node installed and changed the same way, in a process where
// the same code already ran on other data first: a node of 100 remote
// endpoints in a namespace of its own, with a datapath of its own (no
// socket, cache or map shared with the measured one), installed and
// changed the same way (figures warmup_*). If the measured node's first
// changes (control_*) then cost what TestScale's medians do, the first
// change's extra cost is the process's first run of that code (the
// VM's translation of it, the runtime's first use of what it touches),
// not work the datapath leaves for its first change. It runs in a
// process of its own (the test binary again): in the process of the
// other tests its figures would say nothing.
func TestFirstChangeElsewhere(t *testing.T) {
	guest.Require(t)
	if os.Getenv(childEnv) == "" {
		cmd := exec.Command("/proc/self/exe", "-test.run", "^TestFirstChangeElsewhere$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the control in a process of its own: %v", err)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sp, sdp := scaleNodeOf(t, "skbenchw", log, 100)
	if err := sdp.Apply(sp); err != nil {
		t.Fatal(err)
	}
	firstChanges(t, sdp, &sp, "warmup_", countIn(t, "skbenchw", "skpbench")+countIn(t, "skbenchw", offload.VXLANName))

	p, dp := scaleNode(t, "skbenchc", log)
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	// As TestScale between its install and its first change: an
	// unchanged Apply and the counters read.
	for range 11 {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	dp.Rules()
	firstChanges(t, dp, &p, "control_", countIn(t, "skbenchc", "skpbench")+countIn(t, "skbenchc", offload.VXLANName))
}

// childEnv marks the process TestFirstChangeElsewhere runs its control in.
const childEnv = "SKIFF_OFFLOADBENCH_CONTROL"
