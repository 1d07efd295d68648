// Package settings is the cluster-wide configuration of a Skiff
// installation, one YAML file (on Kubernetes, the skiff-config ConfigMap)
// read by the controller (the pod network it makes) and by every agent
// (where the controller is, which datapath, which network pods join, where
// the runtime's CNI files go). Both check the whole file at start and
// refuse it, naming the field, when anything is wrong.
//
//	s, err := settings.Load("/etc/skiff/skiff.yaml")
//	if err != nil { return err }      // "settings: podNetwork.vni: must be 1..16777215, got 0"
//	dir := s.CNI.BinDirFor("k1")      // "{node}" in a path is the node's name
package settings

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxVNI is the largest VXLAN network identifier.
const MaxVNI = 1<<24 - 1

// Settings is the file's content.
type Settings struct {
	// Controller is the address (host:port; several comma-separated, or
	// a dns:/// name) agents dial. Empty: the Kubernetes Service
	// skiff-controller of the agent's namespace (its environment).
	Controller string `json:"controller,omitempty"`
	// Mode is the agents' datapath: auto, software, offload, dpu or
	// dpu-host. Empty: auto.
	Mode string `json:"mode,omitempty"`
	// PodNetwork is the network pods join.
	PodNetwork Network `json:"podNetwork"`
	// CNI says where the runtime's CNI files go on a node.
	CNI CNI `json:"cni,omitempty"`
	// DPUs pairs hosts with their DPUs: host node name -> DPU node name.
	// An agent whose node is a key runs mode dpu-host with that DPU
	// (unless --mode or --dpu say otherwise).
	DPUs map[string]string `json:"dpus,omitempty"`
}

// Network is a Skiff network and its subnets.
type Network struct {
	Name string `json:"name"`
	VNI  uint32 `json:"vni"`
	// MTU inside pods; 0: Skiff's default.
	MTU     uint32   `json:"mtu,omitempty"`
	Subnets []Subnet `json:"subnets,omitempty"`
	// Create makes the controller create the network (and its subnets)
	// when it does not exist. False: it must exist.
	Create bool `json:"create,omitempty"`
	// Egress is what of the pods' traffic leaves the overlay for
	// outside addresses: snat (the default for the pod network:
	// masqueraded to the node's address), routed or none.
	Egress string `json:"egress,omitempty"`
}

// Subnet is a CIDR of the network.
type Subnet struct {
	Name string `json:"name"`
	CIDR string `json:"cidr"`
}

// CNI locates the runtime's CNI directories on a node. "{node}" in a path
// stands for the node's name (several nodes on one machine, in tests).
type CNI struct {
	BinDir  string `json:"binDir,omitempty"`
	ConfDir string `json:"confDir,omitempty"`
	// File is the configuration list's name; runtimes take the first in
	// lexical order.
	File string `json:"file,omitempty"`
}

// BinDirFor and ConfDirFor are the directories on node.
func (c CNI) BinDirFor(node string) string  { return strings.ReplaceAll(c.BinDir, "{node}", node) }
func (c CNI) ConfDirFor(node string) string { return strings.ReplaceAll(c.ConfDir, "{node}", node) }

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	modes  = []string{"auto", "software", "offload", "dpu", "dpu-host"}
	fileRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+\.conflist$`)
)

// Load reads and checks a settings file.
func Load(file string) (*Settings, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	return s, nil
}

// Parse decodes a settings document strictly (an unknown field is an
// error) and checks it, filling defaults.
func Parse(b []byte) (*Settings, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("settings: the file is empty")
	}
	var s Settings
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	return &s, nil
}

func field(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
}

func (s *Settings) check() error {
	if s.Mode == "" {
		s.Mode = "auto"
	}
	if !contains(modes, s.Mode) {
		return field("mode", "%q is not one of %s", s.Mode, strings.Join(modes, ", "))
	}
	if err := checkDPUs(s.DPUs); err != nil {
		return err
	}
	n := &s.PodNetwork
	switch {
	case n.Name == "":
		return field("podNetwork.name", "required")
	case !nameRE.MatchString(n.Name):
		return field("podNetwork.name", "%q must be [a-z0-9.-], starting and ending with a letter or digit", n.Name)
	case n.VNI < 1 || n.VNI > MaxVNI:
		return field("podNetwork.vni", "must be 1..%d, got %d", MaxVNI, n.VNI)
	case n.MTU != 0 && (n.MTU < 576 || n.MTU > 9216):
		return field("podNetwork.mtu", "must be 576..9216 (or 0 for Skiff's default), got %d", n.MTU)
	case n.Create && len(n.Subnets) == 0:
		return field("podNetwork.subnets", "at least one subnet is needed to create the pod network")
	case n.Egress != "" && !contains([]string{"none", "snat", "routed"}, n.Egress):
		return field("podNetwork.egress", "%q is not one of none, snat, routed", n.Egress)
	}
	if n.Egress == "" {
		n.Egress = "snat"
	}
	var prefixes []netip.Prefix
	for i, sn := range n.Subnets {
		f := fmt.Sprintf("podNetwork.subnets[%d]", i)
		if !nameRE.MatchString(sn.Name) {
			return field(f+".name", "%q must be [a-z0-9.-], starting and ending with a letter or digit", sn.Name)
		}
		p, err := netip.ParsePrefix(sn.CIDR)
		if err != nil || p.Masked() != p {
			return field(f+".cidr", "%q is not a network prefix such as 10.244.0.0/16", sn.CIDR)
		}
		for j, q := range prefixes {
			if p.Overlaps(q) {
				return field(f+".cidr", "%s overlaps podNetwork.subnets[%d] (%s)", p, j, q)
			}
		}
		prefixes = append(prefixes, p)
	}
	c := &s.CNI
	if c.BinDir == "" {
		c.BinDir = "/opt/cni/bin"
	}
	if c.ConfDir == "" {
		c.ConfDir = "/etc/cni/net.d"
	}
	if c.File == "" {
		c.File = "10-skiff.conflist"
	}
	switch {
	case !filepath.IsAbs(c.BinDir):
		return field("cni.binDir", "%q must be an absolute path", c.BinDir)
	case !filepath.IsAbs(c.ConfDir):
		return field("cni.confDir", "%q must be an absolute path", c.ConfDir)
	case !fileRE.MatchString(c.File):
		return field("cni.file", "%q must be a file name ending in .conflist", c.File)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkDPUs refuses a pairing the controller would refuse: a bad name,
// a host that is its own DPU or another's DPU, a DPU of two hosts.
func checkDPUs(m map[string]string) error {
	holder := map[string]string{}
	for _, host := range slices.Sorted(maps.Keys(m)) {
		dpu := m[host]
		f := "dpus." + host
		switch {
		case !nameRE.MatchString(host):
			return field("dpus", "%q is not a node name", host)
		case !nameRE.MatchString(dpu):
			return field(f, "%q is not a node name", dpu)
		case dpu == host:
			return field(f, "a node cannot be its own DPU")
		case m[dpu] != "":
			return field(f, "%q is itself a host (it names DPU %q)", dpu, m[dpu])
		case holder[dpu] != "":
			return field(f, "%q is already the DPU of %q; one DPU serves one host", dpu, holder[dpu])
		}
		holder[dpu] = host
	}
	return nil
}
