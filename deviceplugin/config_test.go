package deviceplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfigGood(t *testing.T) {
	c, err := ParseConfig([]byte(`
pools:
  - resourceName: skiff.io/vf
    requireSwitchdev: true
    selectors:
      pfNames: [ens1f0np0]
      vendors: ["15b3"]
      vfIndexes: ["0-3", "7"]
  - resourceName: skiff.io/vf-vfio
    use: vfio
    selectors: {drivers: [vfio-pci]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) != 2 || c.Pools[0].Use != UseNetdev || c.Pools[1].Use != UseVFIO || !c.Pools[0].RequireSwitchdev {
		t.Fatalf("pools = %+v", c.Pools)
	}
	s := c.Pools[0].Selectors
	for _, tc := range []struct {
		c    candidate
		want bool
	}{
		{candidate{pf: "ens1f0np0", vendor: "15b3", index: 0}, true},
		{candidate{pf: "ens1f0np0", vendor: "15b3", index: 3}, true},
		{candidate{pf: "ens1f0np0", vendor: "15b3", index: 4}, false},
		{candidate{pf: "ens1f0np0", vendor: "15b3", index: 7}, true},
		{candidate{pf: "ens1f1np1", vendor: "15b3", index: 0}, false},
		{candidate{pf: "ens1f0np0", vendor: "8086", index: 0}, false},
	} {
		if got := s.match(tc.c); got != tc.want {
			t.Errorf("match(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
	// JSON is YAML.
	if _, err := ParseConfig([]byte(`{"pools":[{"resourceName":"skiff.io/vf","selectors":{"drivers":["mlx5_core"]}}]}`)); err != nil {
		t.Errorf("JSON: %v", err)
	}
}

// TestParseConfigBad: each malformed configuration is refused whole, with
// an error naming the field and the reason.
func TestParseConfigBad(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       []string // field: reason fragments, all expected
	}{
		{"no pools", `pools: []`, []string{"pools: no pools"}},
		{"not YAML", `pools: [`, []string{"(file):"}},
		{"unknown field", `pools: [{resourceName: skiff.io/vf, selector: {drivers: [x]}}]`, []string{`unknown field "selector"`}},
		{"no domain", `pools: [{resourceName: vf, selectors: {drivers: [x]}}]`, []string{`pools[0].resourceName: "vf": want <domain>/<name>`}},
		{"bad domain", `pools: [{resourceName: "Skiff_IO/vf", selectors: {drivers: [x]}}]`, []string{`pools[0].resourceName: "Skiff_IO/vf": domain`}},
		{"reserved domain", `pools: [{resourceName: kubernetes.io/vf, selectors: {drivers: [x]}}]`, []string{"reserved"}},
		{"bad name", `pools: [{resourceName: "skiff.io/-vf", selectors: {drivers: [x]}}]`, []string{`pools[0].resourceName: "skiff.io/-vf": name`}},
		{"duplicate", `pools: [{resourceName: skiff.io/vf, selectors: {drivers: [x]}}, {resourceName: skiff.io/vf, selectors: {drivers: [y]}}]`,
			[]string{`pools[1].resourceName: "skiff.io/vf" is also pools[0]'s`}},
		{"bad use", `pools: [{resourceName: skiff.io/vf, use: dpdk, selectors: {drivers: [x]}}]`, []string{`pools[0].use: "dpdk": want netdev or vfio`}},
		{"no selectors", `pools: [{resourceName: skiff.io/vf}]`, []string{"pools[0].selectors: empty"}},
		{"vendor with 0x", `pools: [{resourceName: skiff.io/vf, selectors: {vendors: ["0x15b3"]}}]`, []string{`pools[0].selectors.vendors[0]: "0x15b3": want four lower-case hex digits`}},
		{"device too long", `pools: [{resourceName: skiff.io/vf, selectors: {devices: ["101e", "1017a"]}}]`, []string{`pools[0].selectors.devices[1]: "1017a"`}},
		{"range backwards", `pools: [{resourceName: skiff.io/vf, selectors: {vfIndexes: ["7-3"]}}]`, []string{`pools[0].selectors.vfIndexes[0]: "7-3": range ends (3) before it starts (7)`}},
		{"range garbage", `pools: [{resourceName: skiff.io/vf, selectors: {vfIndexes: ["a"]}}]`, []string{`pools[0].selectors.vfIndexes[0]: "a": want an index`}},
		{"negative", `pools: [{resourceName: skiff.io/vf, selectors: {vfIndexes: ["-1"]}}]`, []string{`vfIndexes[0]: "-1"`}},
		{"pf name", `pools: [{resourceName: skiff.io/vf, selectors: {pfNames: ["a/b"]}}]`, []string{`pools[0].selectors.pfNames[0]: "a/b" is not a netdev name`}},
		{"all at once", `pools: [{resourceName: vf, use: x, selectors: {vendors: [zz]}}]`,
			[]string{"pools[0].resourceName", "pools[0].use", "pools[0].selectors.vendors[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.conf))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if c != nil {
				t.Errorf("a refused configuration came back: %+v", c)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %v is not a *FieldError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dp.yaml")
	if err := os.WriteFile(p, []byte("pools: [{resourceName: vf, selectors: {drivers: [x]}}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "pools[0].resourceName") {
		t.Errorf("err = %v", err)
	}
	if _, err := LoadConfig(p + ".missing"); err == nil {
		t.Error("missing file accepted")
	}
}
