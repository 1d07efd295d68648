package store

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/skiff-sdn/skiff/controller/ipam"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// MaxVNI is the largest VXLAN network identifier.
const MaxVNI = 1<<24 - 1

var (
	nameRE       = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	labelNameRE  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	namespaceRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	validKinds   = []string{plan.KindVeth, plan.KindVF, plan.KindTap, plan.KindVFIO}
	validModes   = []string{"", "software", "offload", "dpu", "dpu-host"}
	maxNameBytes = 253
)

// ValidateName checks an object name: 1..253 characters of [a-z0-9.-],
// starting and ending with a letter or digit.
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return invalid(field, "required")
	case len(name) > maxNameBytes:
		return invalid(field, "%d characters, at most %d allowed", len(name), maxNameBytes)
	case !nameRE.MatchString(name):
		return invalid(field, "%q has characters outside [a-z0-9.-] or does not start and end with a letter or digit", name)
	}
	return nil
}

func validateNetwork(n *skiffv1.Network) error {
	if err := ValidateName("name", n.GetName()); err != nil {
		return err
	}
	if n.GetVni() < 1 || n.GetVni() > MaxVNI {
		return invalid("vni", "must be 1..%d, got %d", MaxVNI, n.GetVni())
	}
	if m := n.GetMtu(); m != 0 && (m < 576 || m > 9216) {
		return invalid("mtu", "must be 576..9216 (or 0 for the default %d), got %d", plan.DefaultMTU, m)
	}
	if e := n.GetEgress(); e != "" && !plan.ValidEgress(e) {
		return invalid("egress", "%q is not none, snat or routed", e)
	}
	return nil
}

func subnetSpec(s *skiffv1.Subnet) ipam.SubnetSpec {
	spec := ipam.SubnetSpec{CIDR: s.GetCidr(), Gateway: s.GetGateway(), Exclusions: s.GetExclusions()}
	for _, r := range s.GetRanges() {
		spec.Ranges = append(spec.Ranges, [2]string{r.GetStart(), r.GetEnd()})
	}
	return spec
}

// validateSubnet checks a subnet and fills its default gateway. It returns
// the subnet's pool.
func validateSubnet(s *skiffv1.Subnet) (ipam.Pool, error) {
	if err := ValidateName("name", s.GetName()); err != nil {
		return ipam.Pool{}, err
	}
	if err := ValidateName("network", s.GetNetwork()); err != nil {
		return ipam.Pool{}, err
	}
	pool, err := ipam.NewPool(subnetSpec(s))
	if err != nil {
		return ipam.Pool{}, fromField("", err)
	}
	s.Gateway = pool.Gateway.String()
	for i, d := range s.GetDns() {
		a, err := netip.ParseAddr(d)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return ipam.Pool{}, invalid(fmt.Sprintf("dns[%d]", i), "%q is not a DNS server address", d)
		}
		s.Dns[i] = a.String()
	}
	return pool, nil
}

func validateLabels(field string, labels map[string]string) error {
	for k, v := range labels {
		name := k
		if i := strings.LastIndexByte(k, '/'); i >= 0 {
			prefix := k[:i]
			name = k[i+1:]
			if len(prefix) > maxNameBytes || !nameRE.MatchString(prefix) {
				return invalid(field, "key %q: the prefix must be a DNS subdomain", k)
			}
		}
		if len(name) == 0 || len(name) > 63 || !labelNameRE.MatchString(name) {
			return invalid(field, "key %q: must be 1..63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", k)
		}
		if len(v) > 63 || (v != "" && !labelNameRE.MatchString(v)) {
			return invalid(field, "value %q of key %q: must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", v, k)
		}
	}
	return nil
}

// validateEndpoint checks the fields a user gives and normalizes kind and
// MAC. Addresses are checked against subnets by the allocator.
func validateEndpoint(e *skiffv1.Endpoint) error {
	if err := ValidateName("name", e.GetName()); err != nil {
		return err
	}
	if err := ValidateName("network", e.GetNetwork()); err != nil {
		return err
	}
	if err := ValidateName("node", e.GetNode()); err != nil {
		return err
	}
	if e.Kind == "" {
		e.Kind = plan.KindVeth
	}
	if !contains(validKinds, e.Kind) {
		return invalid("kind", "%q is not one of %s", e.Kind, strings.Join(validKinds, ", "))
	}
	if e.GetMac() != "" {
		mac, err := ipam.ParseMAC(e.GetMac())
		if err != nil {
			return fromField("", err)
		}
		e.Mac = mac
	}
	for i, s := range e.GetIps() {
		if _, err := parseEndpointIP(s); err != nil {
			return invalid(fmt.Sprintf("ips[%d]", i), "%q is not an IP address", s)
		}
	}
	if err := validateLabels("labels", e.GetLabels()); err != nil {
		return err
	}
	if ns := e.GetNamespace(); ns != "" && (len(ns) > 63 || !namespaceRE.MatchString(ns)) {
		return invalid("namespace", "%q is not a valid namespace name", ns)
	}
	if len(e.GetOwner()) > maxNameBytes {
		return invalid("owner", "at most %d characters", maxNameBytes)
	}
	if e.VfIndex != nil {
		if e.Kind != plan.KindVF && e.Kind != plan.KindVFIO {
			return invalid("vfIndex", "only for kind vf or vfio, not %s", e.Kind)
		}
		if e.GetVfIndex() < 0 || e.GetVfIndex() > 65535 {
			return invalid("vfIndex", "must be 0..65535, got %d", e.GetVfIndex())
		}
	}
	if e.Counters != nil || e.CountersTime != nil || e.Revision != 0 || e.Port != nil {
		return invalid("counters", "output-only fields (counters, countersTime, revision, port) must not be set")
	}
	return validatePort(e)
}

// parseEndpointIP accepts an address or address/prefix and returns the
// address.
func parseEndpointIP(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Addr(), err
	}
	return netip.ParseAddr(s)
}

func validateNode(n *skiffv1.Node) error {
	if err := ValidateName("name", n.GetName()); err != nil {
		return err
	}
	a, err := netip.ParseAddr(n.GetUnderlayIp())
	if err != nil {
		return invalid("underlayIp", "%q is not an IP address", n.GetUnderlayIp())
	}
	if a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
		return invalid("underlayIp", "%s cannot be a VTEP address", a)
	}
	n.UnderlayIp = a.String()
	if n.GetHostIp() != "" {
		h, err := netip.ParseAddr(n.GetHostIp())
		switch {
		case err != nil:
			return invalid("hostIp", "%q is not an IP address", n.GetHostIp())
		case h.Is4() == a.Is4():
			return invalid("hostIp", "%s is of the underlay address %s's family; the host address is the node's address of the other family", h, a)
		case !h.IsGlobalUnicast() || h.Zone() != "":
			return invalid("hostIp", "%s is not a unicast address the node's peers can route to", h)
		}
		n.HostIp = h.String()
	}
	if !contains(validModes, n.GetMode()) {
		return invalid("mode", "%q is not one of software, offload, dpu, dpu-host", n.GetMode())
	}
	switch {
	case n.GetMode() == "dpu-host" && n.GetDpu() == "":
		return invalid("dpu", "node %q runs mode dpu-host: it must name its DPU node (skiff-agent --dpu NODE)", n.GetName())
	case n.GetMode() != "dpu-host" && n.GetDpu() != "":
		return invalid("dpu", "only a node in mode dpu-host names a DPU; node %q runs mode %q", n.GetName(), n.GetMode())
	case n.GetDpu() == n.GetName() && n.GetDpu() != "":
		return invalid("dpu", "node %q cannot be its own DPU", n.GetName())
	case n.GetDpu() != "":
		if err := ValidateName("dpu", n.GetDpu()); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
