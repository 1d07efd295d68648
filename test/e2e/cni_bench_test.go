package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkCNI compares skiff-cni with the CNI project's reference bridge
// plugin (host-local IPAM) on the same machine in the same run, and Skiff's
// overlay with plain kernel VXLAN set up by hand and with the raw underlay.
// Run (root):
//
//	go test -run '^$' -bench CNI -benchtime 1x -timeout 30m ./test/e2e/
func BenchmarkCNI(b *testing.B) {
	for b.Loop() {
		benchCNI(b)
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// plugin runs a CNI plugin inside a node's namespace, as a runtime on that
// node would, and returns how long it took.
func plugin(b *testing.B, nodeNS, path, command, id, netns, conf string) time.Duration {
	b.Helper()
	d, err := tryPlugin(nodeNS, path, command, id, netns, conf)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func tryPlugin(nodeNS, path, command, id, netns, conf string) (time.Duration, error) {
	cmd := exec.Command("ip", "netns", "exec", nodeNS, path)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS="+netns,
		"CNI_IFNAME=eth0", "CNI_PATH="+filepath.Dir(path))
	cmd.Stdin = strings.NewReader(conf)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s %s %s: %v\n%s", filepath.Base(path), command, id, err, out)
	}
	return d, nil
}

func benchCNI(b *testing.B) {
	refDir := b.TempDir()
	build := exec.Command("go", "build", "-o", refDir+"/", "github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the reference plugins: %v\n%s", err, out)
	}
	for _, f := range []string{"skiff-cni"} {
		data, _ := os.ReadFile(filepath.Join(binDir, f))
		_ = os.WriteFile(filepath.Join(refDir, f), data, 0o755)
	}
	c := newCluster(b, "n1", "n2")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	n1, n2 := c.nodes["n1"], c.nodes["n2"]
	skiffConf := cniConf("blue", n1.socket, "1.1.0")
	refConf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ref","type":"bridge","bridge":"refbr0","isGateway":true,
		"ipam":{"type":"host-local","subnet":"203.0.113.0/24","dataDir":%q}}`, b.TempDir())
	testkit.Eventually(b, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", skiffConf); return err }))
	skiffBin, refBin := filepath.Join(refDir, "skiff-cni"), filepath.Join(refDir, "bridge")
	pods := make([]string, 30)
	for i := range pods {
		pods[i] = testkit.New(b)
	}

	// Sequential ADD/DEL latency, interleaved so both see the same noise.
	const rounds = 40
	var sAdd, sDel, rAdd, rDel []time.Duration
	// Warm both (the first ADD creates the bridge).
	plugin(b, n1.ns, skiffBin, "ADD", "warm", testkit.Path(pods[0]), skiffConf)
	plugin(b, n1.ns, refBin, "ADD", "warm", testkit.Path(pods[1]), refConf)
	for i := range rounds {
		id := fmt.Sprintf("seq-%d", i)
		p := testkit.Path(pods[2+i%20])
		sAdd = append(sAdd, plugin(b, n1.ns, skiffBin, "ADD", id, p, skiffConf))
		sDel = append(sDel, plugin(b, n1.ns, skiffBin, "DEL", id, p, skiffConf))
		q := testkit.Path(pods[2+(i+10)%20])
		rAdd = append(rAdd, plugin(b, n1.ns, refBin, "ADD", id, q, refConf))
		rDel = append(rDel, plugin(b, n1.ns, refBin, "DEL", id, q, refConf))
	}
	plugin(b, n1.ns, skiffBin, "DEL", "warm", testkit.Path(pods[0]), skiffConf)
	plugin(b, n1.ns, refBin, "DEL", "warm", testkit.Path(pods[1]), refConf)

	// A burst of 30 concurrent ADDs, then their DELs.
	burst := func(bin, conf string) (total time.Duration, each []time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for i, ns := range pods {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := tryPlugin(n1.ns, bin, "ADD", fmt.Sprintf("burst-%d", i), testkit.Path(ns), conf)
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				each = append(each, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		total = time.Since(start)
		if b.Failed() {
			b.FailNow()
		}
		for i, ns := range pods {
			plugin(b, n1.ns, bin, "DEL", fmt.Sprintf("burst-%d", i), testkit.Path(ns), conf)
		}
		return total, each
	}
	sBurst, sEach := burst(skiffBin, skiffConf)
	rBurst, rEach := burst(refBin, refConf)

	// Time from ADD returning on n1 to the pod answering a pod on n2.
	peer := testkit.New(b)
	plugin(b, n2.ns, skiffBin, "ADD", "peer", testkit.Path(peer), cniConf("blue", n2.socket, "1.1.0"))
	var reach []time.Duration
	for i := range 10 {
		id := fmt.Sprintf("reach-%d", i)
		out, err := cniRun("ADD", id, testkit.Path(pods[i]), "eth0", skiffConf)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var r cniResult
		_ = json.Unmarshal([]byte(out), &r)
		ip := strings.Split(r.IPs[0].Address, "/")[0]
		for {
			if _, err := testkit.Try(peer, "ping", "-c", "1", "-W", "0.1", "-i", "0.05", ip); err == nil {
				break
			}
			if time.Since(start) > 20*time.Second {
				b.Fatalf("%s never became reachable", ip)
			}
		}
		reach = append(reach, time.Since(start))
		if _, err := cniRun("DEL", id, testkit.Path(pods[i]), "eth0", skiffConf); err != nil {
			b.Fatal(err)
		}
	}

	// Throughput: Skiff pod to pod across nodes; plain kernel VXLAN and a
	// bridge set up by hand between the same two nodes; the raw underlay.
	pa, pb := pods[20], pods[21]
	outA, _ := cniRun("ADD", "tp-a", testkit.Path(pa), "eth0", skiffConf)
	if _, err := cniRun("ADD", "tp-b", testkit.Path(pb), "eth0", cniConf("blue", n2.socket, "1.1.0")); err != nil {
		b.Fatal(err)
	}
	_ = outA
	ipB := firstIPv4(b, pb)
	skiffBps := iperf(b, pa, pb, ipB)
	hp := handVXLAN(b, n1.ns, n2.ns, pods[22], pods[23])
	plainBps := iperf(b, pods[22], pods[23], hp)
	rawBps := iperf(b, n1.ns, n2.ns, n2.ip)

	b.ReportMetric(ms(pct(sAdd, .5)), "skiff-add-p50-ms")
	b.ReportMetric(ms(pct(sAdd, .99)), "skiff-add-p99-ms")
	b.ReportMetric(ms(pct(sDel, .5)), "skiff-del-p50-ms")
	b.ReportMetric(ms(pct(sDel, .99)), "skiff-del-p99-ms")
	b.ReportMetric(ms(pct(rAdd, .5)), "bridge-add-p50-ms")
	b.ReportMetric(ms(pct(rAdd, .99)), "bridge-add-p99-ms")
	b.ReportMetric(ms(pct(rDel, .5)), "bridge-del-p50-ms")
	b.ReportMetric(ms(pct(rDel, .99)), "bridge-del-p99-ms")
	b.ReportMetric(ms(sBurst), "skiff-burst30-ms")
	b.ReportMetric(ms(rBurst), "bridge-burst30-ms")
	b.ReportMetric(ms(pct(sEach, .99)), "skiff-burst-add-p99-ms")
	b.ReportMetric(ms(pct(rEach, .99)), "bridge-burst-add-p99-ms")
	b.ReportMetric(ms(pct(reach, .5)), "add-to-reachable-p50-ms")
	b.ReportMetric(ms(pct(reach, .9)), "add-to-reachable-p90-ms")
	b.ReportMetric(skiffBps/1e9, "skiff-Gbit/s")
	b.ReportMetric(plainBps/1e9, "plain-vxlan-Gbit/s")
	b.ReportMetric(rawBps/1e9, "underlay-Gbit/s")
	b.Logf("ratios: ADD p50 skiff/bridge %.2f, DEL p50 %.2f, burst %.2f; throughput skiff/plain-vxlan %.2f, skiff/underlay %.2f",
		ms(pct(sAdd, .5))/ms(pct(rAdd, .5)), ms(pct(sDel, .5))/ms(pct(rDel, .5)), ms(sBurst)/ms(rBurst), skiffBps/plainBps, skiffBps/rawBps)
}

// firstIPv4 returns the first IPv4 address of eth0 in namespace ns.
func firstIPv4(b testing.TB, ns string) string {
	b.Helper()
	out := testkit.Run(b, ns, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	f := strings.Fields(out)
	for i, w := range f {
		if w == "inet" {
			return strings.Split(f[i+1], "/")[0]
		}
	}
	b.Fatalf("no IPv4 address in %s", ns)
	return ""
}

// iperf measures TCP throughput from client to server (bits per second),
// over 4 seconds.
func iperf(b *testing.B, clientNS, serverNS, serverIP string) float64 {
	b.Helper()
	testkit.Run(b, serverNS, "iperf3", "-s", "-1", "-D", "-B", serverIP)
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	var out string
	var err error
	for range 50 {
		if out, err = testkit.Try(clientNS, "iperf3", "-c", serverIP, "-t", "4", "-J"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		b.Fatalf("iperf3 to %s: %v\n%s", serverIP, err, out)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		b.Fatalf("iperf3 output: %v", err)
	}
	return res.End.SumReceived.BitsPerSecond
}

// handVXLAN builds what an operator would by hand between the two nodes:
// a VXLAN device (VNI 999, nolearning) and a bridge on each, static FDB
// entries, and a veth into one pod namespace on each side. It returns the
// server pod's address.
func handVXLAN(b *testing.B, ns1, ns2, pod1, pod2 string) string {
	b.Helper()
	type side struct{ node, pod, local, remote, ip string }
	sides := []side{{ns1, pod1, "192.0.2.1", "192.0.2.2", "203.0.113.201"}, {ns2, pod2, "192.0.2.2", "192.0.2.1", "203.0.113.202"}}
	for _, s := range sides {
		for _, cmd := range [][]string{
			{"ip", "link", "add", "hvx", "type", "vxlan", "id", "999", "local", s.local, "dstport", "4789", "nolearning"},
			{"ip", "link", "add", "hbr", "type", "bridge"},
			{"ip", "link", "set", "hvx", "master", "hbr", "mtu", "1450", "up"},
			{"ip", "link", "set", "hbr", "up"},
			{"bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "hvx", "dst", s.remote},
			{"ip", "link", "add", "hvp", "mtu", "1450", "type", "veth", "peer", "name", "eth9", "netns", s.pod},
			{"ip", "link", "set", "hvp", "master", "hbr", "up"},
		} {
			testkit.Run(b, s.node, cmd...)
		}
		testkit.Run(b, s.pod, "ip", "addr", "add", s.ip+"/24", "dev", "eth9")
		testkit.Run(b, s.pod, "ip", "link", "set", "eth9", "up")
	}
	return sides[1].ip
}
