package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `
controller: 10.96.0.40:7400
podNetwork:
  name: pods
  vni: 4096
  create: true
  subnets:
  - {name: pods-v4, cidr: 10.244.0.0/16}
  - {name: pods-v6, cidr: "fd00:10:244::/56"}
cni:
  binDir: /tmp/k/{node}/cni/bin
  confDir: /tmp/k/{node}/cni/net.d
`

func TestParse(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != "auto" || s.PodNetwork.Name != "pods" || s.PodNetwork.VNI != 4096 || len(s.PodNetwork.Subnets) != 2 ||
		s.CNI.File != "10-skiff.conflist" || s.CNI.BinDirFor("k1") != "/tmp/k/k1/cni/bin" || s.CNI.ConfDirFor("k2") != "/tmp/k/k2/cni/net.d" {
		t.Errorf("settings %+v", s)
	}
	if p, err := Parse([]byte("podNetwork: {name: pods, vni: 1}\ndpus: {h1: d1, h2: d2}\n")); err != nil || p.DPUs["h2"] != "d2" {
		t.Errorf("dpus: %+v %v", p, err)
	}
	d, err := Parse([]byte("podNetwork: {name: pods, vni: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.CNI.BinDir != "/opt/cni/bin" || d.CNI.ConfDir != "/etc/cni/net.d" || d.Controller != "" {
		t.Errorf("defaults %+v", d)
	}
}

// TestRefused: every bad field is named, with the reason.
func TestRefused(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "empty"},
		{"podNetwork: {name: pods, vni: 0}", "podNetwork.vni: must be 1..16777215, got 0"},
		{"podNetwork: {name: pods, vni: 16777216}", "podNetwork.vni: must be 1..16777215, got 16777216"},
		{"podNetwork: {name: pods, vni: -1}", "vni"},
		{"podNetwork: {vni: 1}", "podNetwork.name: required"},
		{"podNetwork: {name: Pods, vni: 1}", "podNetwork.name"},
		{"podNetwork: {name: pods, vni: 1, mtu: 100}", "podNetwork.mtu"},
		{"podNetwork: {name: pods, vni: 1, create: true}", "podNetwork.subnets: at least one"},
		{"podNetwork: {name: pods, vni: 1, subnets: [{name: a, cidr: 10.244.0.1/16}]}", "podNetwork.subnets[0].cidr"},
		{"podNetwork: {name: pods, vni: 1, subnets: [{name: a, cidr: 10.0.0.0/8}, {name: b, cidr: 10.244.0.0/16}]}", "podNetwork.subnets[1].cidr: 10.244.0.0/16 overlaps podNetwork.subnets[0]"},
		{"podNetwork: {name: pods, vni: 1, subnets: [{name: A, cidr: 10.0.0.0/8}]}", "podNetwork.subnets[0].name"},
		{"mode: turbo\npodNetwork: {name: pods, vni: 1}", "mode: \"turbo\""},
		{"podNetwork: {name: pods, vni: 1}\ncni: {binDir: opt/cni}", "cni.binDir"},
		{"podNetwork: {name: pods, vni: 1}\ncni: {file: ../x.conflist}", "cni.file"},
		{"podNetwork: {name: pods, vni: 1}\nvnii: 3", "unknown field \"vnii\""},
		{"podNetwork: [1, 2]", "settings:"},
		{"podNetwork: {name: pods, vni: 1}\ndpus: {h1: h1}", "dpus.h1: a node cannot be its own DPU"},
		{"podNetwork: {name: pods, vni: 1}\ndpus: {h1: d1, h2: d1}", `dpus.h2: "d1" is already the DPU of "h1"`},
		{"podNetwork: {name: pods, vni: 1}\ndpus: {h1: h2, h2: d2}", `dpus.h1: "h2" is itself a host`},
		{"podNetwork: {name: pods, vni: 1}\ndpus: {h1: D1}", `dpus.h1: "D1" is not a node name`},
	} {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "settings: ") {
			t.Errorf("%q: %v; want an error with %q", c.doc, err, c.want)
		}
	}
}

func TestLoad(t *testing.T) {
	f := filepath.Join(t.TempDir(), "skiff.yaml")
	if err := os.WriteFile(f, []byte("podNetwork: {name: pods, vni: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(f); err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "podNetwork.vni") {
		t.Errorf("Load: %v", err)
	}
	if _, err := Load(f + ".missing"); err == nil {
		t.Error("loaded a missing file")
	}
}

// TestPodNetworkEgress: snat unless the settings say otherwise; a bad
// egress names the field.
func TestPodNetworkEgress(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "snat", ""},
		{"egress: routed", "routed", ""},
		{"egress: none", "none", ""},
		{"egress: masquerade", "", `podNetwork.egress: "masquerade" is not one of none, snat, routed`},
	} {
		s, err := Parse([]byte("podNetwork:\n  name: pods\n  vni: 4096\n  " + tc.in + "\n"))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && s.PodNetwork.Egress != tc.want:
			t.Errorf("%q: egress %q, want %q", tc.in, s.PodNetwork.Egress, tc.want)
		}
	}
}
