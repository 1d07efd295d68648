package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkDPUReboot250 times a DPU's recovery at 250 endpoints on the
// host kernel (the DPU agent on the software datapath; the offload one
// runs in the kernel VM, test/kernelvm/dpuvm): 250 VF pods on the
// dpu-host node, then the DPU "reboots" (its agent killed, every object
// of its namespace gone: bridge, VXLAN device, nftables; the host's VFs
// destroyed in the pods with their representors, and re-created in the
// host) and its agent starts again on its state directory. Measured:
// from the VFs' re-creation to all 250 back in their pods (the dpu-host
// agent's doing), and from the DPU agent's start to all 250
// representors adopted and on the network's bridge, and to its first
// whole apply. Run (root):
//
//	go test -run '^$' -bench DPUReboot250 -benchtime 1x -timeout 30m ./test/e2e/
func BenchmarkDPUReboot250(b *testing.B) {
	for b.Loop() {
		benchDPUReboot(b, 250)
	}
}

// TestDPUReboot is the same recovery at 8 endpoints, for the e2e suite.
func TestDPUReboot(t *testing.T) { benchDPUReboot(t, 8) }

func benchDPUReboot(b testing.TB, pods int) {
	c := newDPUCluster(b, pods)
	h1, d1, n2 := c.nodes["h1"], c.nodes["d1"], c.nodes["n2"]
	var batch strings.Builder
	testkit.Eventually(b, "", 20*time.Second, testkit.NoError(func() error {
		_, err := cniRun("STATUS", "", "", "", cniConf("blue", h1.socket, "1.1.0"))
		return err
	}))
	peer := testkit.New(b)
	out, err := cniRun("ADD", "peer", testkit.Path(peer), "eth0", cniConf("blue", n2.socket, "1.1.0"))
	if err != nil {
		b.Fatal(err)
	}
	var res cniResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) != 1 {
		b.Fatalf("ADD peer printed %q: %v", out, err)
	}
	peerIP := strings.Split(res.IPs[0].Address, "/")[0]
	cniBin := filepath.Join(binDir, "skiff-cni")
	podNS := make([]string, pods)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, pods)
	for i := range pods {
		podNS[i] = testkit.New(b)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := tryPlugin(h1.ns, cniBin, "ADD", fmt.Sprintf("vf-%d", i), testkit.Path(podNS[i]), vfConf("blue", h1.socket, i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("%d VF pods ADDed on the dpu-host (4 at a time) in %v", pods, time.Since(start).Round(time.Millisecond))
	attached := func() int {
		out, err := testkit.Try(d1.ns, "ip", "-o", "link", "show", "master", "skb100")
		if err != nil { // no bridge
			return 0
		}
		return strings.Count(out, "skiff:rep ep=")
	}
	if n := attached(); n != pods {
		b.Fatalf("%d representors on the bridge before the reboot, want %d", n, pods)
	}

	// The reboot: the agent killed, every object of the DPU gone, and
	// the host's VFs re-created (the PF reset destroys each VF netdev,
	// in its pod, with its representor, and makes a new one in the
	// host). The host's agent keeps running.
	stop(d1.agent)
	batch.Reset()
	for i := range pods {
		testkit.Run(b, podNS[i], "ip", "link", "del", "eth0")
	}
	for _, l := range strings.Split(testkit.Run(b, d1.ns, "ip", "-o", "link", "show"), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]; strings.HasPrefix(name, "sk") {
			fmt.Fprintf(&batch, "link del dev %s\n", name)
		}
	}
	ipBatch(b, d1.ns, batch.String())
	testkit.Run(b, d1.ns, "nft", "flush", "ruleset")
	if n := attached(); n != 0 {
		b.Fatalf("%d representors still on a bridge after the reboot", n)
	}
	if out := testkit.Run(b, d1.ns, "ip", "-o", "link", "show"); strings.Contains(out, "skiff:") {
		b.Fatalf("Skiff's objects survived the reboot:\n%s", out)
	}
	batch.Reset()
	for i := range pods {
		fmt.Fprintf(&batch, "link add vf%d type veth peer name rep%d netns %s\n", i, i, d1.ns)
	}
	recreated := time.Now()
	ipBatch(b, h1.ns, batch.String())
	// The dpu-host agent logs each VF it moves back; the time is its
	// last such line's.
	var moved time.Duration
	for moved == 0 {
		if time.Since(recreated) > 5*time.Minute {
			b.Fatalf("after 5 min: %d of %d VFs moved back into their pods", len(movedBack(b, h1.log)), pods)
		}
		if at := movedBack(b, h1.log); len(at) == pods {
			moved = slices.MaxFunc(at, time.Time.Compare).Sub(recreated)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range pods {
		if out := testkit.Run(b, podNS[i], "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, " inet ") {
			b.Fatalf("pod %d's re-created VF has no address: %s", i, out)
		}
	}
	b.Logf("host VFs re-created -> all %d moved back into their pods by the dpu-host agent: %v", pods, moved.Round(time.Millisecond))
	booted := time.Now()
	c.startAgent("d1")
	var replumbed, applied time.Duration
	for replumbed == 0 || applied == 0 {
		if time.Since(booted) > 5*time.Minute {
			b.Fatalf("after 5 min: %d of %d representors attached, applied %v", attached(), pods, applied)
		}
		if replumbed == 0 && attached() == pods {
			replumbed = time.Since(booted)
		}
		if applied == 0 {
			if log, _ := os.ReadFile(d1.log); strings.Contains(string(log), "datapath applied") {
				applied = time.Since(booted)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Logf("DPU rebooted with %d endpoints: agent start -> all representors adopted and on the bridge %v, -> first apply logged %v",
		pods, replumbed.Round(time.Millisecond), applied.Round(time.Millisecond))
	if bb, ok := b.(*testing.B); ok {
		bb.ReportMetric(float64(replumbed.Milliseconds()), "replumb-ms")
		bb.ReportMetric(float64(applied.Milliseconds()), "applied-ms")
		bb.ReportMetric(float64(moved.Milliseconds()), "vfs-back-ms")
	}
	for _, i := range []int{0, pods - 1} {
		testkit.MustPing(b, podNS[i], peerIP, 1, 2*time.Second)
	}
}

// ipBatch runs iproute2 commands (one a line) in namespace ns.
func ipBatch(t testing.TB, ns, cmds string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ip.batch")
	if err := os.WriteFile(f, []byte(cmds), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, ns, "ip", "-batch", f)
}

// movedBack gives the times of the "VF re-created" lines of an agent's log.
func movedBack(t testing.TB, log string) []time.Time {
	t.Helper()
	b, _ := os.ReadFile(log)
	var out []time.Time
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "VF re-created: moved back into its pod") {
			continue
		}
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time="))
		if err != nil {
			t.Fatalf("agent log line %q: %v", l, err)
		}
		out = append(out, at)
	}
	return out
}
