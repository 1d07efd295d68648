package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkCNIDPUHost times CNI ADD and DEL of pods with a VF on a
// dpu-host node (the VF into the pod, the DPU's agent adopting its
// representor, its report back through the host's plan stream) against
// pods with a veth on a software node, in the same run, alternating. The
// VFs are the e2e bench's veth stand-ins (dpu_test.go). Run (root):
//
//	go test -run '^$' -bench CNIDPUHost -benchtime 1x ./test/e2e/
func BenchmarkCNIDPUHost(b *testing.B) {
	for b.Loop() {
		benchCNIDPUHost(b)
	}
}

func benchCNIDPUHost(b *testing.B) {
	const pods = 40
	c := newDPUCluster(b, pods)
	h1, n2 := c.nodes["h1"], c.nodes["n2"]
	testkit.Eventually(b, "", 20*time.Second, testkit.NoError(func() error {
		for _, n := range []*node{h1, n2} {
			if _, err := cniRun("STATUS", "", "", "", cniConf("blue", n.socket, "1.1.0")); err != nil {
				return err
			}
		}
		return nil
	}))
	cniBin := filepath.Join(binDir, "skiff-cni")
	var addVF, addVeth, delVF, delVeth []time.Duration
	type pod struct{ id, ns, node, conf string }
	var made []pod
	for i := range pods {
		vf := pod{fmt.Sprintf("vf-%d", i), testkit.New(b), h1.ns, vfConf("blue", h1.socket, i)}
		ve := pod{fmt.Sprintf("ve-%d", i), testkit.New(b), n2.ns, cniConf("blue", n2.socket, "1.1.0")}
		addVF = append(addVF, plugin(b, vf.node, cniBin, "ADD", vf.id, testkit.Path(vf.ns), vf.conf))
		addVeth = append(addVeth, plugin(b, ve.node, cniBin, "ADD", ve.id, testkit.Path(ve.ns), ve.conf))
		made = append(made, vf, ve)
	}
	for i := 0; i < len(made); i += 2 {
		vf, ve := made[i], made[i+1]
		delVF = append(delVF, plugin(b, vf.node, cniBin, "DEL", vf.id, testkit.Path(vf.ns), vf.conf))
		delVeth = append(delVeth, plugin(b, ve.node, cniBin, "DEL", ve.id, testkit.Path(ve.ns), ve.conf))
	}
	b.Logf("CNI ADD, %d pods each: dpu-host VF p50 %.1f ms p99 %.1f ms; software veth p50 %.1f ms p99 %.1f ms",
		pods, ms(pct(addVF, .5)), ms(pct(addVF, .99)), ms(pct(addVeth, .5)), ms(pct(addVeth, .99)))
	b.Logf("CNI DEL: dpu-host VF p50 %.1f ms p99 %.1f ms; software veth p50 %.1f ms p99 %.1f ms",
		ms(pct(delVF, .5)), ms(pct(delVF, .99)), ms(pct(delVeth, .5)), ms(pct(delVeth, .99)))
	b.ReportMetric(ms(pct(addVF, .5)), "vf-add-p50-ms")
	b.ReportMetric(ms(pct(addVeth, .5)), "veth-add-p50-ms")
}

// newDPUCluster starts a cluster of a dpu-host h1, its DPU d1 (software
// datapath) and a software node n2, with vfs VFs stood in by veth pairs
// (vfN in h1, repN in d1, dpu_test.go), and network blue with a subnet.
func newDPUCluster(t testing.TB, vfs int) *cluster {
	t.Helper()
	hostTable, dpuTable := vfTable(t, "vf", vfs), vfTable(t, "rep", vfs)
	c := newClusterArgs(t, map[string][]string{
		"h1": {"--mode", "dpu-host", "--dpu", "d1", "--vf-table", hostTable},
		"d1": {"--mode", "dpu", "--vf-table", dpuTable},
	}, nil, "h1", "d1", "n2")
	var batch strings.Builder
	for i := range vfs {
		fmt.Fprintf(&batch, "link add vf%d type veth peer name rep%d netns %s\n", i, i, c.nodes["d1"].ns)
	}
	ipBatch(t, c.nodes["h1"].ns, batch.String())
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	return c
}
