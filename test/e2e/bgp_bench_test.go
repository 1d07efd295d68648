package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/controller/bgp"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// frrReceived returns the prefixes FRR's bgpd has received from its EVPN
// neighbours.
func frrReceived(dir string) (int, error) {
	out, err := exec.Command("vtysh", "--vty_socket", dir, "-c", "show bgp l2vpn evpn summary json").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("vtysh: %v: %s", err, out)
	}
	var s struct {
		Peers map[string]struct {
			PfxRcd int `json:"pfxRcd"`
			State  string
		} `json:"peers"`
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return 0, fmt.Errorf("summary %q: %w", out, err)
	}
	n := 0
	for _, p := range s.Peers {
		n += p.PfxRcd
	}
	return n, nil
}

// BenchmarkBGPFRR100k: time for Skiff's speaker to advertise 100,000
// type-2 routes and for FRR's bgpd (Debian frr, over loopback, without
// zebra) to hold them all, then to withdraw them. Run with -benchtime 1x.
func BenchmarkBGPFRR100k(b *testing.B) {
	const n = 100000
	if _, err := os.Stat(filepath.Join(frrDir, "bgpd")); err != nil {
		b.Fatalf("FRR is not installed (%v): run hack/deps.sh", err)
	}
	for i := 0; i < b.N; i++ {
		spPort, frrPort := testkit.FreePort(b), testkit.FreePort(b)
		dir, err := os.MkdirTemp("", "skiff-frr-bench-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		conf := fmt.Sprintf(`hostname bench
router bgp 64600
 bgp router-id 192.0.2.50
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor 127.0.0.1 remote-as 64512
 neighbor 127.0.0.1 port %d
 neighbor 127.0.0.1 timers connect 1
 address-family l2vpn evpn
  neighbor 127.0.0.1 activate
 exit-address-family
`, spPort)
		if err := os.WriteFile(filepath.Join(dir, "bgpd.conf"), []byte(conf), 0o644); err != nil {
			b.Fatal(err)
		}
		_ = exec.Command("chown", "-R", "frr:frr", dir).Run()
		_ = os.Chmod(dir, 0o755)
		logf, _ := os.Create(filepath.Join(dir, "bgpd.log"))
		cmd := exec.Command(filepath.Join(frrDir, "bgpd"), "-Z", "-f", filepath.Join(dir, "bgpd.conf"), "-i", filepath.Join(dir, "bgpd.pid"),
			"--vty_socket", dir, "-u", "frr", "-g", "frr", "-P", "0", "-l", "127.0.0.2", "-p", strconv.Itoa(frrPort))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stopFRR := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		cfg := bgp.Config{ASN: 64512, RouterID: "192.0.2.254", ListenPort: int32(spPort), ListenAddresses: []string{"127.0.0.1"},
			Peers: []bgp.Peer{{Address: "127.0.0.2", ASN: 64600, Port: uint32(frrPort)}}}
		sp, err := bgp.New(context.Background(), cfg, slog.New(slog.DiscardHandler), bgp.Options{})
		if err != nil {
			stopFRR()
			b.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			ps, _ := sp.Peers(context.Background())
			if len(ps) == 1 && ps[0].State == "established" {
				break
			}
			if time.Now().After(deadline) {
				sp.Close()
				stopFRR()
				log, _ := os.ReadFile(filepath.Join(dir, "bgpd.log"))
				b.Fatalf("no session with FRR: %v\n%s", ps, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
		var s bgp.State
		for v := 0; v < 10; v++ {
			s.Networks = append(s.Networks, bgp.Network{Name: fmt.Sprintf("net%d", v), VNI: uint32(1000 + v)})
		}
		for j := 0; j < 100; j++ {
			s.Nodes = append(s.Nodes, bgp.Node{Name: fmt.Sprintf("n%d", j), VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(j + 1)}), Connected: true})
		}
		for j := 0; j < n; j++ {
			s.Endpoints = append(s.Endpoints, bgp.Endpoint{Name: fmt.Sprintf("e%d", j), Network: fmt.Sprintf("net%d", j%10), Node: fmt.Sprintf("n%d", (j/10)%100),
				MAC: fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(j>>24), byte(j>>16), byte(j>>8), byte(j)),
				IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(j >> 16), byte(j >> 8), byte(j)})}})
		}
		start := time.Now()
		want := cfg.Desired(s)
		if _, _, err := sp.Advertise(want); err != nil {
			b.Fatal(err)
		}
		advertised := time.Since(start)
		for {
			got, err := frrReceived(dir)
			if err != nil {
				b.Fatal(err)
			}
			if got >= len(want) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		held := time.Since(start)
		start = time.Now()
		if _, _, err := sp.Advertise(nil); err != nil {
			b.Fatal(err)
		}
		for {
			got, err := frrReceived(dir)
			if err != nil {
				b.Fatal(err)
			}
			if got == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		gone := time.Since(start)
		b.ReportMetric(float64(len(want)), "routes")
		b.ReportMetric(advertised.Seconds(), "advertised-s")
		b.ReportMetric(held.Seconds(), "frr-holds-s")
		b.ReportMetric(gone.Seconds(), "frr-withdrawn-s")
		sp.Close()
		stopFRR()
	}
}
