package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkVMPort measures, over 10 VM ports made one after another on
// n1, each with a real guest (qemu, TCG) booted on it: skiffctl port
// create returning (the tap made and attached), the guest's eth0 up (its
// boot), the guest holding its DHCP lease (udhcpc's discover, offer,
// request, ack), and a pod on n2 getting the guest's first ping reply; and
// the agent's DHCP answer time (request in, answer out). Run (root):
//
//	go test -run '^$' -bench VMPort -benchtime 1x ./test/e2e/
func BenchmarkVMPort(b *testing.B) {
	g := testGuest(b, mixInit)
	for b.Loop() {
		benchVMPort(b, g)
	}
}

func benchVMPort(b *testing.B, g kernelvm.Guest) {
	c := newCluster(b, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	n1, n2 := c.nodes["n1"], c.nodes["n2"]
	podNS := testkit.New(b)
	if _, err := localapi.NewClient(n2.socket).Create(b.Context(), localapi.CreateRequest{Name: "pod2", Network: "blue",
		NetNS: testkit.Path(podNS), IfName: "eth0"}); err != nil {
		b.Fatal(err)
	}
	const runs = 10
	var created, up, leased, reached []time.Duration
	for i := range runs {
		start := time.Now()
		p := c.port("port", "create", "--vm", fmt.Sprintf("bench%d", i), "--network", "blue", "--node", "n1")
		created = append(created, time.Since(start))
		lines, stop := bootMixGuest(b, g, n1.ns, p.Port.HostIf, p.Mac, "", nil)
		for l := range lines {
			if l == "GUEST-UP" {
				up = append(up, time.Since(start))
			}
			if strings.HasPrefix(l, "GUEST-LEASE") {
				leased = append(leased, time.Since(start))
				break
			}
			if strings.HasPrefix(l, "GUEST-") && strings.Contains(l, "FAILED") {
				b.Fatalf("guest: %s", l)
			}
		}
		ip := strings.Split(p.Ips[0], "/")[0]
		for exec.Command("ip", "netns", "exec", podNS, "ping", "-c", "1", "-W", "0.2", ip).Run() != nil {
			if time.Since(start) > time.Minute {
				b.Fatalf("the pod on n2 never reached guest %d at %s", i, ip)
			}
		}
		reached = append(reached, time.Since(start))
		stop()
		c.mustCtl("port", "delete", "--vm", fmt.Sprintf("bench%d", i))
	}
	var sum, count float64
	for _, l := range strings.Split(testkit.Run(b, n1.ns, "curl", "-s", "http://"+n1.ip+":9100/metrics"), "\n") {
		if v, ok := strings.CutPrefix(l, "skiff_agent_dhcp_answer_seconds_sum "); ok {
			fmt.Sscan(v, &sum)
		}
		if v, ok := strings.CutPrefix(l, "skiff_agent_dhcp_answer_seconds_count "); ok {
			fmt.Sscan(v, &count)
		}
	}
	if count == 0 {
		b.Fatal("n1's agent answered no DHCP request")
	}
	b.ReportMetric(ms(pct(created, .5)), "create-p50-ms")
	b.ReportMetric(ms(pct(up, .5)), "create-to-guest-up-p50-ms")
	b.ReportMetric(ms(pct(leased, .5)), "create-to-lease-p50-ms")
	b.ReportMetric(ms(pct(reached, .5)), "create-to-reachable-p50-ms")
	b.ReportMetric(ms(pct(reached, 1)), "create-to-reachable-max-ms")
	b.ReportMetric(sum/count*1000, "dhcp-answer-mean-ms")
	b.ReportMetric(count, "dhcp-answers")
}
