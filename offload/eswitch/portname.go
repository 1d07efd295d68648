package eswitch

import (
	"fmt"
	"regexp"
	"strconv"
)

// PortKind is what a switchdev port (a representor) stands for.
type PortKind string

// Port kinds, from phys_port_name.
const (
	PortUplink PortKind = "uplink"  // pN, pNsM: the physical port
	PortVF     PortKind = "vf"      // pfNvfM, cCpfNvfM
	PortHostPF PortKind = "host-pf" // pfNhpf, cCpfN: a host PF seen from a DPU
	PortSF     PortKind = "sf"      // pfNsfM, cCpfNsfM
)

// PortName is a parsed phys_port_name.
type PortName struct {
	Kind PortKind
	// Controller is the devlink controller number: 0 for this host's own
	// functions, 1 (usually) for the external host behind a DPU.
	Controller int
	// External reports that the name carried a controller (cN prefix) or
	// named a host PF (hpf): the function belongs to another host.
	External bool
	PF       int // PF number (pf<N>), or the port number of an uplink (p<N>)
	VF       int // VF number, -1 unless Kind is PortVF
	SF       int // SF number, -1 unless Kind is PortSF
	Split    int // split sub-port of an uplink (pNsM), -1 when not split
}

var (
	reUplink = regexp.MustCompile(`^p(\d+)(?:s(\d+))?$`)
	reVF     = regexp.MustCompile(`^(?:c(\d+))?pf(\d+)vf(\d+)$`)
	reSF     = regexp.MustCompile(`^(?:c(\d+))?pf(\d+)sf(\d+)$`)
	reHPF    = regexp.MustCompile(`^pf(\d+)hpf$`)
	reCPF    = regexp.MustCompile(`^c(\d+)pf(\d+)$`)
)

// ParsePortName parses a phys_port_name. It returns an error for names in
// none of the known forms (for example a driver's free-form name).
func ParsePortName(s string) (PortName, error) {
	n := PortName{VF: -1, SF: -1, Split: -1}
	var numErr error
	num := func(v string) int {
		if v == "" {
			return -1
		}
		i, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			numErr = fmt.Errorf("phys_port_name %q: number %s out of range", s, v)
			return -1
		}
		return int(i)
	}
	switch {
	case reUplink.MatchString(s):
		m := reUplink.FindStringSubmatch(s)
		n.Kind, n.PF, n.Split = PortUplink, num(m[1]), num(m[2])
	case reVF.MatchString(s):
		m := reVF.FindStringSubmatch(s)
		n.Kind, n.PF, n.VF = PortVF, num(m[2]), num(m[3])
		if m[1] != "" {
			n.Controller, n.External = num(m[1]), true
		}
	case reSF.MatchString(s):
		m := reSF.FindStringSubmatch(s)
		n.Kind, n.PF, n.SF = PortSF, num(m[2]), num(m[3])
		if m[1] != "" {
			n.Controller, n.External = num(m[1]), true
		}
	case reHPF.MatchString(s):
		m := reHPF.FindStringSubmatch(s)
		// mlx5 names the host PF representor pfNhpf; the host is controller 1.
		n.Kind, n.PF, n.Controller, n.External = PortHostPF, num(m[1]), 1, true
	case reCPF.MatchString(s):
		m := reCPF.FindStringSubmatch(s)
		n.Kind, n.Controller, n.PF, n.External = PortHostPF, num(m[1]), num(m[2]), true
	default:
		return PortName{}, fmt.Errorf("phys_port_name %q is in no known form (pN, pfNvfM, cCpfNvfM, pfNhpf, cCpfN, pfNsfM)", s)
	}
	if numErr != nil {
		return PortName{}, numErr
	}
	return n, nil
}

// String gives the canonical form back.
func (n PortName) String() string {
	c := ""
	if n.External && n.Kind != PortHostPF {
		c = fmt.Sprintf("c%d", n.Controller)
	}
	switch n.Kind {
	case PortUplink:
		if n.Split >= 0 {
			return fmt.Sprintf("p%ds%d", n.PF, n.Split)
		}
		return fmt.Sprintf("p%d", n.PF)
	case PortVF:
		return fmt.Sprintf("%spf%dvf%d", c, n.PF, n.VF)
	case PortSF:
		return fmt.Sprintf("%spf%dsf%d", c, n.PF, n.SF)
	case PortHostPF:
		return fmt.Sprintf("pf%dhpf", n.PF)
	}
	return ""
}
