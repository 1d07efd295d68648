package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Use says what a pool's VFs are for.
type Use string

// Uses.
const (
	// UseNetdev: the VF's netdev is moved into the pod (kernel driver
	// bound, mlx5_core and the like).
	UseNetdev Use = "netdev"
	// UseVFIO: the VF's PCI function is on vfio-pci and handed whole to a
	// VM or a userspace driver; Allocate gives /dev/vfio device specs.
	UseVFIO Use = "vfio"
)

// PoolsConfig is the device plugin's configuration file (YAML or JSON).
//
//	pools:
//	  - resourceName: skiff.io/vf
//	    use: netdev
//	    requireSwitchdev: true
//	    selectors:
//	      pfNames: [ens1f0np0]
//	      vendors: ["15b3"]
//	      devices: ["101e"]
//	      drivers: [mlx5_core]
//	      vfIndexes: ["0-7"]
type PoolsConfig struct {
	Pools []Pool `json:"pools"`
}

// Pool is one resource the plugin advertises.
type Pool struct {
	// ResourceName is the extended resource (domain/name) pods ask for.
	ResourceName string `json:"resourceName"`
	// Use is netdev (default) or vfio.
	Use Use `json:"use,omitempty"`
	// RequireSwitchdev: a VF is healthy only while its PF's eswitch is in
	// switchdev mode and the VF has a representor (what the offload
	// datapath needs). Off for the host side of a DPU, whose eswitch is
	// the DPU's.
	RequireSwitchdev bool `json:"requireSwitchdev,omitempty"`
	// Selectors choose the pool's VFs: a VF is in the pool when it
	// matches every selector that is set (and one of the values of
	// each). At least one must be set.
	Selectors Selectors `json:"selectors"`
}

// Selectors choose VFs. Lists are alternatives; unset lists match all.
type Selectors struct {
	// PFNames are PF netdev names (ens1f0np0).
	PFNames []string `json:"pfNames,omitempty"`
	// Vendors and Devices are the VF's PCI vendor and device IDs, four
	// hex digits without 0x (15b3, 101e).
	Vendors []string `json:"vendors,omitempty"`
	Devices []string `json:"devices,omitempty"`
	// Drivers are the drivers the VF's PCI function is bound to.
	Drivers []string `json:"drivers,omitempty"`
	// VFIndexes are VF indexes or ranges of them ("3", "0-7").
	VFIndexes []string `json:"vfIndexes,omitempty"`

	ranges []indexRange
}

type indexRange struct{ lo, hi int }

// FieldError is a configuration error: the field (pools[1].selectors.vendors[0])
// and why it is wrong.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// LoadConfig reads and checks a configuration file.
func LoadConfig(path string) (*PoolsConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes (YAML or JSON; unknown fields are errors) and
// checks a configuration. Every problem is reported, each a *FieldError;
// a configuration with any problem is refused whole.
func ParseConfig(b []byte) (*PoolsConfig, error) {
	var c PoolsConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, &FieldError{Field: "(file)", Reason: err.Error()}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

var hexID = regexp.MustCompile(`^[0-9a-f]{4}$`)

func (c *PoolsConfig) validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, a...)})
	}
	if len(c.Pools) == 0 {
		bad("pools", "no pools: nothing to advertise")
	}
	seen := map[string]int{}
	for i := range c.Pools {
		p := &c.Pools[i]
		f := fmt.Sprintf("pools[%d]", i)
		if reason := resourceNameProblem(p.ResourceName); reason != "" {
			bad(f+".resourceName", "%q: %s", p.ResourceName, reason)
		} else if j, dup := seen[p.ResourceName]; dup {
			bad(f+".resourceName", "%q is also pools[%d]'s", p.ResourceName, j)
		} else {
			seen[p.ResourceName] = i
		}
		switch p.Use {
		case "":
			p.Use = UseNetdev
		case UseNetdev, UseVFIO:
		default:
			bad(f+".use", "%q: want netdev or vfio", p.Use)
		}
		s := &p.Selectors
		sf := f + ".selectors"
		if len(s.PFNames)+len(s.Vendors)+len(s.Devices)+len(s.Drivers)+len(s.VFIndexes) == 0 {
			bad(sf, "empty: select by at least one of pfNames, vendors, devices, drivers, vfIndexes")
		}
		for j, n := range s.PFNames {
			if n == "" || len(n) > 15 || strings.ContainsAny(n, "/ \t:") {
				bad(fmt.Sprintf("%s.pfNames[%d]", sf, j), "%q is not a netdev name", n)
			}
		}
		for _, l := range []struct {
			name string
			ids  []string
		}{{"vendors", s.Vendors}, {"devices", s.Devices}} {
			for j, id := range l.ids {
				if !hexID.MatchString(id) {
					bad(fmt.Sprintf("%s.%s[%d]", sf, l.name, j), "%q: want four lower-case hex digits (15b3)", id)
				}
			}
		}
		for j, d := range s.Drivers {
			if d == "" || strings.ContainsAny(d, "/ \t") {
				bad(fmt.Sprintf("%s.drivers[%d]", sf, j), "%q is not a driver name", d)
			}
		}
		s.ranges = nil
		for j, r := range s.VFIndexes {
			ir, err := parseRange(r)
			if err != nil {
				bad(fmt.Sprintf("%s.vfIndexes[%d]", sf, j), "%q: %v", r, err)
				continue
			}
			s.ranges = append(s.ranges, ir)
		}
	}
	return errors.Join(errs...)
}

// resourceNameProblem checks an extended resource name as the kubelet
// does: domain/name, a DNS subdomain outside kubernetes.io, a qualified
// name. It returns "" when the name is good.
func resourceNameProblem(n string) string {
	if n == "" {
		return "missing"
	}
	domain, name, ok := strings.Cut(n, "/")
	if !ok {
		return "want <domain>/<name> (skiff.io/vf)"
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return "domain " + strings.Join(errs, "; ")
	}
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		return "the kubernetes.io domain is reserved"
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 || strings.Contains(name, "/") {
		return "name " + strings.Join(errs, "; ")
	}
	return ""
}

func parseRange(s string) (indexRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil || a < 0 {
		return indexRange{}, errors.New("want an index (3) or a range (0-7) of non-negative integers")
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < 0 {
			return indexRange{}, errors.New("want an index (3) or a range (0-7) of non-negative integers")
		}
	}
	if b < a {
		return indexRange{}, fmt.Errorf("range ends (%d) before it starts (%d)", b, a)
	}
	return indexRange{a, b}, nil
}

// candidate is what selectors look at.
type candidate struct {
	pf, vendor, device, driver string
	index                      int
}

func (s *Selectors) match(c candidate) bool {
	in := func(list []string, v string) bool {
		if len(list) == 0 {
			return true
		}
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}
	if !in(s.PFNames, c.pf) || !in(s.Vendors, c.vendor) || !in(s.Devices, c.device) || !in(s.Drivers, c.driver) {
		return false
	}
	if len(s.ranges) == 0 {
		return true
	}
	for _, r := range s.ranges {
		if c.index >= r.lo && c.index <= r.hi {
			return true
		}
	}
	return false
}
