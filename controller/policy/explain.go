package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Side is one end of an explained flow: whether the endpoint is isolated
// in that direction, the policies that select it, and the rules that let
// the flow through.
type Side struct {
	Endpoint   string   // empty for an address outside the cluster
	Isolated   bool     // some policy of this direction selects it
	SelectedBy []string // "namespace/name"
	AllowedBy  []string // "namespace/name ingress[i]" or "... egress[i]"
	Allowed    bool
}

// Explanation says whether a flow passes and why.
type Explanation struct {
	Allowed bool
	Egress  Side // the source's side
	Ingress Side // the destination's side
}

// Explain reads the policies as Kubernetes defines them for one new flow
// from src to dst (endpoints; nil for an address outside the cluster, given
// by srcIP/dstIP) on proto (TCP, UDP, SCTP or ICMP) and port.
func Explain(pols []Policy, src, dst *Endpoint, srcIP, dstIP netip.Addr, proto string, port uint16, nsLabels map[string]map[string]string) Explanation {
	c := &compiler{ns: nsLabels}
	side := func(self, peer *Endpoint, peerIP netip.Addr, ingress bool) Side {
		var s Side
		if self == nil {
			s.Allowed = true
			return s
		}
		s.Endpoint = self.Name
		sorted := slices.Clone(pols)
		slices.SortFunc(sorted, func(a, b Policy) int { return cmp.Compare(a.Key(), b.Key()) })
		for _, p := range sorted {
			sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			if err != nil || p.Namespace != self.Namespace || !sel.Matches(labels.Set(self.Labels)) {
				continue
			}
			in, out := types(p)
			if (ingress && !in) || (!ingress && !out) {
				continue
			}
			s.Isolated = true
			s.SelectedBy = append(s.SelectedBy, p.Key())
			if ingress {
				for i, r := range p.Spec.Ingress {
					if c.peerMatches(r.From, p.Namespace, peer, peerIP) && portMatches(r.Ports, proto, port) {
						s.AllowedBy = append(s.AllowedBy, fmt.Sprintf("%s ingress[%d]", p.Key(), i))
					}
				}
			} else {
				for i, r := range p.Spec.Egress {
					if c.peerMatches(r.To, p.Namespace, peer, peerIP) && portMatches(r.Ports, proto, port) {
						s.AllowedBy = append(s.AllowedBy, fmt.Sprintf("%s egress[%d]", p.Key(), i))
					}
				}
			}
		}
		s.Allowed = !s.Isolated || len(s.AllowedBy) > 0
		return s
	}
	e := Explanation{Egress: side(src, dst, dstIP, false), Ingress: side(dst, src, srcIP, true)}
	e.Allowed = e.Egress.Allowed && e.Ingress.Allowed
	return e
}

func (c *compiler) peerMatches(peers []networkingv1.NetworkPolicyPeer, policyNS string, peer *Endpoint, peerIP netip.Addr) bool {
	if len(peers) == 0 {
		return true
	}
	for _, x := range peers {
		if x.IPBlock != nil {
			cidr, err := netip.ParsePrefix(x.IPBlock.CIDR)
			if err != nil || !peerIP.IsValid() || !cidr.Contains(peerIP) {
				continue
			}
			excluded := false
			for _, ex := range x.IPBlock.Except {
				if p, err := netip.ParsePrefix(ex); err == nil && p.Contains(peerIP) {
					excluded = true
				}
			}
			if !excluded {
				return true
			}
			continue
		}
		if peer == nil {
			continue // selectors pick endpoints only
		}
		inNS := peer.Namespace == policyNS
		if x.NamespaceSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(x.NamespaceSelector)
			inNS = err == nil && peer.Namespace != "" && s.Matches(c.nsLabels(peer.Namespace))
		}
		podOK := true
		if x.PodSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(x.PodSelector)
			podOK = err == nil && s.Matches(labels.Set(peer.Labels))
		}
		if inNS && podOK {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, proto string, port uint16) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		want := "TCP"
		if p.Protocol != nil {
			want = string(*p.Protocol)
		}
		if want != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if int32(port) >= p.Port.IntVal && int32(port) <= end {
			return true
		}
	}
	return false
}
