package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestBGPBadInput: skiff-controller refuses bad BGP flags and files with
// an error that names the field, before it starts anything; skiffctl bgp
// says when the controller runs without BGP.
func TestBGPBadInput(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badFile, []byte("asn: 64512\nrouterID: 192.0.2.1\npeers:\n- address: 192.0.2.2\n  asn: 64513\n  multihop: 400\nnetworks:\n- vni: 20000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.json")
	if err := os.WriteFile(unknown, []byte(`{"asn": 64512, "routerId": "192.0.2.1", "colour": "blue"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--bgp-asn", "0", "--bgp-router-id", "192.0.2.1"}, []string{"asn: 0 is not a usable AS number"}},
		{[]string{"--bgp-asn", "64512", "--bgp-router-id", "nope"}, []string{`routerID: "nope" is not an IPv4 address`}},
		{[]string{"--bgp-asn", "64512", "--bgp-router-id", "192.0.2.1", "--bgp-peer", "192.0.2.300,64513"}, []string{`peers[0].address: "192.0.2.300" is not a unicast IP address`}},
		{[]string{"--bgp-asn", "64512", "--bgp-router-id", "192.0.2.1", "--bgp-peer", "192.0.2.2,64513", "--bgp-peer", "192.0.2.2,64514"}, []string{"peers[1].address: 192.0.2.2 duplicates peers[0]"}},
		{[]string{"--bgp-asn", "64512", "--bgp-router-id", "192.0.2.1", "--bgp-peer", "192.0.2.2"}, []string{`bgp-peer "192.0.2.2": want ADDR,ASN`}},
		{[]string{"--bgp-router-id", "192.0.2.1"}, []string{"bgp-asn: required"}},
		{[]string{"--bgp-config", badFile}, []string{"peers[0].multihop: 400 is more than 255", "networks[0].vni: must be 1..16777215, got 20000000"}},
		{[]string{"--bgp-config", unknown}, []string{unknown, `unknown field "colour"`}},
		{[]string{"--bgp-config", filepath.Join(dir, "missing.yaml")}, []string{"missing.yaml", "no such file"}},
	} {
		cmd := exec.Command(filepath.Join(binDir, "skiff-controller"), append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%v: accepted:\n%s", tc.args, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}

	addr := testkit.FreeAddr(t)
	startController(t, addr, "--data-dir", t.TempDir())
	for _, sub := range []string{"peers", "routes"} {
		out, errOut, err := skiffctl(addr, "bgp", sub)
		if err == nil || !strings.Contains(errOut, "without BGP") {
			t.Errorf("skiffctl bgp %s against a controller without BGP: %v\n%s%s", sub, err, out, errOut)
		}
	}
	if _, errOut, err := skiffctl(addr, "bgp", "routes", "--vni", "20000000"); err == nil || !strings.Contains(errOut, "--vni: must be 1..16777215") {
		t.Errorf("bad --vni: %v %s", err, errOut)
	}
}
