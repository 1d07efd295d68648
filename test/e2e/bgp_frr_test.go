package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

const frrDir = "/usr/lib/frr"

// frr is zebra and bgpd running in one namespace, with their sockets,
// pid files and configuration in a directory of their own.
type frr struct {
	t          testing.TB
	ns, dir    string
	zebra, bgp *exec.Cmd
}

func startFRR(t testing.TB, ns, bgpConf string) *frr {
	t.Helper()
	if _, err := os.Stat(filepath.Join(frrDir, "bgpd")); err != nil {
		t.Fatalf("FRR is not installed (%v): run hack/deps.sh", err)
	}
	dir, err := os.MkdirTemp("", "skiff-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &frr{t: t, ns: ns, dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "zebra.conf"), []byte("hostname bm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bgpd.conf"), []byte(bgpConf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemons drop to the frr user; vtysh reaches them through the
	// vty sockets in dir.
	if out, err := exec.Command("chown", "-R", "frr:frr", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v: %s", dir, err, out)
	}
	f.zebra = f.daemon("zebra")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := os.Stat(filepath.Join(dir, "zserv.api")); return err }))
	f.bgp = f.daemon("bgpd")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := f.vtysh("show bgp summary json"); return err }))
	t.Cleanup(f.stop)
	return f
}

func (f *frr) daemon(name string) *exec.Cmd {
	log := filepath.Join(f.dir, name+".log")
	lf, err := os.Create(log)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", f.ns, filepath.Join(frrDir, name),
		"-f", filepath.Join(f.dir, name+".conf"), "-i", filepath.Join(f.dir, name+".pid"),
		"-z", filepath.Join(f.dir, "zserv.api"), "--vty_socket", f.dir, "-u", "frr", "-g", "frr", "-P", "0")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if f.t.Failed() {
			b, _ := os.ReadFile(log)
			f.t.Logf("%s log:\n%s", name, tail(string(b), 30))
		}
	})
	return cmd
}

// restartBGP stops bgpd (its sessions close) and starts it again.
func (f *frr) restartBGP() {
	stopDaemon(f.bgp)
	f.bgp = f.daemon("bgpd")
}

// stop ends bgpd and zebra (zebra removes the FDB entries it installed).
func (f *frr) stop() {
	stopDaemon(f.bgp)
	stopDaemon(f.zebra)
}

func stopDaemon(c *exec.Cmd) {
	if c == nil || c.Process == nil || c.ProcessState != nil {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

func (f *frr) vtysh(cmd string) (string, error) {
	return testkit.Try(f.ns, "vtysh", "--vty_socket", f.dir, "-c", cmd)
}

// frrRoute is one EVPN path as FRR's JSON shows it.
type frrRoute struct {
	Type    int
	MAC, IP string
	NextHop string
	Comm    string
}

func (r frrRoute) String() string {
	return fmt.Sprintf("type%d mac=%s ip=%s nh=%s comm=%q", r.Type, r.MAC, r.IP, r.NextHop, r.Comm)
}

// evpnRoutes returns the paths of `show bgp l2vpn evpn json`, found by
// walking the JSON for objects with a routeType.
func (f *frr) evpnRoutes() ([]frrRoute, error) {
	out, err := f.vtysh("show bgp l2vpn evpn json")
	if err != nil {
		return nil, fmt.Errorf("vtysh: %v: %s", err, out)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("vtysh output %q: %w", tail(out, 5), err)
	}
	var rs []frrRoute
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if rt, ok := v["routeType"].(float64); ok {
				r := frrRoute{Type: int(rt)}
				r.MAC, _ = v["mac"].(string)
				r.IP, _ = v["ip"].(string)
				if c, ok := v["extendedCommunity"].(map[string]any); ok {
					r.Comm, _ = c["string"].(string)
				}
				if nhs, ok := v["nexthops"].([]any); ok && len(nhs) > 0 {
					if nh, ok := nhs[0].(map[string]any); ok {
						r.NextHop, _ = nh["ip"].(string)
					}
				}
				rs = append(rs, r)
				return
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return rs, nil
}

func hasRoute(rs []frrRoute, f func(frrRoute) bool) bool { return slices.ContainsFunc(rs, f) }

const bmConf = `hostname bm
router bgp 64600
 bgp router-id 192.0.2.50
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor 192.0.2.254 remote-as 64512
 neighbor 192.0.2.254 timers connect 2
 address-family l2vpn evpn
  neighbor 192.0.2.254 activate
  advertise-all-vni
  vni 100
   route-target import 64512:100
   route-target export 64600:100
  exit-vni
 exit-address-family
`

// TestBGPInteropFRR: the real controller speaks EVPN with FRR on a
// "bare-metal server" namespace whose VXLAN device zebra drives; a Skiff
// pod and the server's host ping each other over VXLAN both ways; deleting
// the pod and stopping FRR remove the state on both sides.
func TestBGPInteropFRR(t *testing.T) {
	c := newCluster(t, "n1")
	// Restart the controller (same data) with BGP.
	stop(c.ctrl)
	conf := filepath.Join(t.TempDir(), "bgp.yaml")
	if err := os.WriteFile(conf, []byte("importHoldTime: 8s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(c.ctrlLog)
	c.ctrl = exec.Command("ip", "netns", "exec", c.ul, filepath.Join(binDir, "skiff-controller"), "--listen", ctrlAddr, "--data-dir", c.data,
		"--bgp-asn", "64512", "--bgp-router-id", "192.0.2.254", "--bgp-peer", "192.0.2.50,64600", "--bgp-config", conf,
		"--metrics-addr", "192.0.2.254:9200", "--log-level", "debug")
	c.ctrl.Stdout, c.ctrl.Stderr = logf, logf
	if err := c.ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(c.ctrlLog)
			t.Logf("controller log:\n%s", tail(string(b), 60))
		}
	})
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := c.ctl("get", "nodes"); return err }))
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")

	// The bare-metal server: underlay address, a bridge with a kernel
	// VXLAN device (VNI 100) and a host behind the bridge.
	bm := testkit.New(t)
	testkit.Run(t, c.ul, "ip", "link", "add", "ulpbm", "type", "veth", "peer", "name", "eth0", "netns", bm)
	testkit.Run(t, c.ul, "ip", "link", "set", "ulpbm", "master", "ul0", "up")
	testkit.Run(t, bm, "ip", "addr", "add", "192.0.2.50/24", "dev", "eth0")
	testkit.Run(t, bm, "ip", "link", "set", "eth0", "up")
	testkit.Run(t, bm, "ip", "link", "add", "br100", "type", "bridge")
	testkit.Run(t, bm, "ip", "link", "add", "vxlan100", "type", "vxlan", "id", "100", "dstport", "4789", "local", "192.0.2.50", "nolearning")
	testkit.Run(t, bm, "ip", "link", "set", "vxlan100", "master", "br100", "up")
	testkit.Run(t, bm, "ip", "link", "set", "br100", "up")
	host := testkit.New(t)
	const hostMAC, hostIP = "02:bb:00:00:00:01", "198.51.100.200"
	testkit.Run(t, bm, "ip", "link", "add", "hbm", "type", "veth", "peer", "name", "eth0", "netns", host)
	testkit.Run(t, bm, "ip", "link", "set", "hbm", "master", "br100", "up")
	testkit.Run(t, host, "ip", "link", "set", "eth0", "address", hostMAC, "mtu", "1450")
	testkit.Run(t, host, "ip", "addr", "add", hostIP+"/24", "dev", "eth0")
	testkit.Run(t, host, "ip", "link", "set", "eth0", "up")
	f := startFRR(t, bm, bmConf)

	// Two pods on n1.
	sock := c.nodes["n1"].socket
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", cniConf("blue", sock, "1.1.0")); return err }))
	type pod struct{ id, ns, ip, mac string }
	add := func(id string) pod {
		t.Helper()
		p := pod{id: id, ns: testkit.New(t)}
		out, err := cniRun("ADD", id, testkit.Path(p.ns), "eth0", cniConf("blue", sock, "1.1.0"))
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		var r cniResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.IPs) != 1 || len(r.Interfaces) != 2 {
			t.Fatalf("ADD %s printed %q: %v", id, out, err)
		}
		p.ip, p.mac = strings.Split(r.IPs[0].Address, "/")[0], r.Interfaces[1].Mac
		return p
	}
	pa, pb := add("bgp-a"), add("bgp-b")

	// The session comes up and FRR holds Skiff's routes: type 2 per pod and
	// type 3 for n1, next hop n1's VTEP, RT 64512:100, VXLAN encapsulation.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		out, _ := c.ctl("bgp", "peers")
		if !strings.Contains(out, "192.0.2.50") || !strings.Contains(out, "established") {
			return fmt.Errorf("skiffctl bgp peers:\n%s", out)
		}
		return nil
	}))
	skiffRoute := func(typ int, mac, ip string) func(frrRoute) bool {
		return func(r frrRoute) bool {
			return r.Type == typ && r.MAC == mac && (ip == "" || r.IP == ip) && r.NextHop == "192.0.2.1" &&
				strings.Contains(r.Comm, "RT:64512:100") && strings.Contains(r.Comm, "ET:8")
		}
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		rs, err := f.evpnRoutes()
		if err != nil {
			return err
		}
		for _, want := range []func(frrRoute) bool{skiffRoute(2, pa.mac, pa.ip), skiffRoute(2, pb.mac, pb.ip), skiffRoute(3, "", "192.0.2.1")} {
			if !hasRoute(rs, want) {
				return fmt.Errorf("FRR lacks a Skiff route (pods %s %s, %s %s); has:\n%v", pa.mac, pa.ip, pb.mac, pb.ip, rs)
			}
		}
		return nil
	}))

	// The host speaks first (its MAC becomes known to zebra and is
	// advertised); then both directions over VXLAN.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		err := testkit.Ping(host, pa.ip, 1, time.Second)
		return err
	}))
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		out, err := c.ctl("bgp", "routes", "--vni", "100")
		if err != nil || !strings.Contains(out, hostMAC) || !strings.Contains(out, "192.0.2.50") {
			return fmt.Errorf("skiffctl bgp routes lacks the host: %v\n%s", err, out)
		}
		return nil
	}))
	var table struct {
		Routes []struct {
			Type         int `json:"type"`
			Vni          int `json:"vni"`
			Mac, NextHop string
			Peer         string   `json:"peer"`
			RouteTargets []string `json:"routeTargets"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(c.mustCtl("bgp", "routes", "--vni", "100", "-o", "json")), &table); err != nil {
		t.Fatal(err)
	}
	learned := 0
	for _, r := range table.Routes {
		if r.Vni != 100 || len(r.RouteTargets) != 1 {
			t.Errorf("route %+v", r)
		}
		if r.Peer == "192.0.2.50" {
			learned++
			if r.NextHop != "192.0.2.50" || r.RouteTargets[0] != "64600:100" {
				t.Errorf("learned route %+v", r)
			}
		} else if r.NextHop != "192.0.2.1" || r.RouteTargets[0] != "64512:100" {
			t.Errorf("local route %+v", r)
		}
	}
	if len(table.Routes) != 5 || learned != 2 {
		t.Errorf("skiffctl bgp routes -o json: %d routes, %d learned; want 5 and 2 (pods a, b, n1's type 3; host, server's type 3)", len(table.Routes), learned)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		fdb := c.fdb("n1", 100)
		if !strings.Contains(fdb, hostMAC+" 192.0.2.50") || !strings.Contains(fdb, "00:00:00:00:00:00 192.0.2.50") {
			return fmt.Errorf("n1 fdb lacks the external VTEP: %s", fdb)
		}
		return nil
	}))
	t.Logf("pod -> host: %s", testkit.Run(t, pa.ns, "ping", "-c", "2", "-W", "2", hostIP))
	t.Logf("host -> pod: %s", testkit.Run(t, host, "ping", "-c", "2", "-W", "2", pb.ip))
	rs, _ := f.evpnRoutes()
	t.Logf("FRR EVPN table: %v", rs)
	t.Logf("skiffctl bgp routes:\n%s", c.mustCtl("bgp", "routes"))
	t.Logf("skiffctl bgp peers:\n%s", c.mustCtl("bgp", "peers"))
	t.Logf("n1 fdb: %s", c.fdb("n1", 100))
	bmFDB := func() string { out, _ := testkit.Try(bm, "bridge", "fdb", "show", "dev", "vxlan100"); return out }
	t.Logf("server fdb:\n%s", bmFDB())
	if out := bmFDB(); !strings.Contains(out, pa.mac+" dst 192.0.2.1") || !strings.Contains(out, "00:00:00:00:00:00 dst 192.0.2.1") {
		t.Fatalf("the bare-metal server's VXLAN lacks Skiff's entries:\n%s", out)
	}
	metrics, _ := testkit.Try(c.ul, "curl", "-s", "http://192.0.2.254:9200/metrics")
	for _, want := range []string{`skiff_bgp_session_established{peer="192.0.2.50"} 1`, `skiff_bgp_routes_advertised{type="2"} 2`,
		`skiff_bgp_routes_advertised{type="3"} 1`, `skiff_bgp_routes_learned{type="3"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}

	// FRR's bgpd flaps (stops, starts, the session comes back with the
	// same routes) within the import hold time: n1's plan and forwarding
	// entries do not move.
	planRev := func() string { return strings.SplitN(c.mustCtl("plan", "n1"), "\n", 2)[0] }
	revBefore, fdbBefore := planRev(), c.fdb("n1", 100)
	watchDone, watchErr := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(watchErr)
		for {
			select {
			case <-watchDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if got := c.fdb("n1", 100); got != fdbBefore {
				watchErr <- got
				return
			}
		}
	}()
	f.restartBGP()
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		out, _ := c.ctl("bgp", "peers")
		if !strings.Contains(out, "established") {
			return fmt.Errorf("session not back:\n%s", out)
		}
		return nil
	}))
	time.Sleep(9 * time.Second) // past the hold time
	close(watchDone)
	if got, changed := <-watchErr; changed {
		t.Fatalf("n1's forwarding entries changed during the flap: %s (before %s)", got, fdbBefore)
	}
	if after := planRev(); after != revBefore {
		t.Fatalf("n1's plan changed during the flap: %s, before %s", after, revBefore)
	}
	testkit.MustPing(t, pa.ns, hostIP, 1, 2*time.Second)

	// Deleting pod a withdraws its route: FRR and zebra's FDB drop it.
	if _, err := cniRun("DEL", pa.id, testkit.Path(pa.ns), "eth0", cniConf("blue", sock, "1.1.0")); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		rs, err := f.evpnRoutes()
		if err != nil {
			return err
		}
		if hasRoute(rs, func(r frrRoute) bool { return r.MAC == pa.mac }) {
			return fmt.Errorf("FRR still has pod a's route")
		}
		if !hasRoute(rs, skiffRoute(2, pb.mac, pb.ip)) {
			return fmt.Errorf("FRR lost pod b's route")
		}
		if strings.Contains(bmFDB(), pa.mac) {
			return fmt.Errorf("the server still forwards to pod a: %s", bmFDB())
		}
		return nil
	}))

	// Stopping FRR: after the import hold time (8s) n1 forgets the external
	// VTEP and host; pod b no longer reaches the host.
	f.stop()
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if fdb := c.fdb("n1", 100); strings.Contains(fdb, "192.0.2.50") {
			return fmt.Errorf("n1 still has external entries: %s", fdb)
		}
		return nil
	}))
	if err := testkit.Ping(pb.ns, hostIP, 1, time.Second); err == nil {
		t.Fatal("pod b still reaches the host after FRR stopped")
	}
	out := c.mustCtl("bgp", "routes", "--vni", "100")
	if strings.Contains(out, hostMAC) || !strings.Contains(out, pb.mac) {
		t.Fatalf("skiffctl bgp routes after FRR stopped:\n%s", out)
	}

	// Node lost: n1's agent dies, its status lease goes, and so do the
	// routes of its endpoints (the endpoint itself stays in the store).
	stop(c.nodes["n1"].agent)
	testkit.Eventually(t, "routes of the lost node withdrawn", 45*time.Second, func() (bool, string) {
		out = c.mustCtl("bgp", "routes", "--vni", "100")
		return !strings.Contains(out, pb.mac) && !strings.Contains(out, "local"), "still advertised:\n" + out
	})
	if !strings.Contains(c.mustCtl("get", "endpoints"), pb.ip) {
		t.Fatal("pod b's endpoint left the store")
	}
}
