package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Endpoint is what the compiler needs to know of an endpoint.
type Endpoint struct {
	Name      string
	Node      string
	Network   string // tenant network; networks may reuse addresses
	Namespace string
	Labels    map[string]string
	IPs       []netip.Addr
}

// Port is an allowed protocol and port range; Port 0 means every port of
// the protocol.
type Port struct {
	Protocol string // TCP, UDP or SCTP
	Port     uint16
	EndPort  uint16 // equal to Port for a single port
}

// Peer is an allowed peer: an address group, or a CIDR with exceptions.
type Peer struct {
	Group  string
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// Rule allows traffic from (ingress) or to (egress) any of Peers on any of
// Ports. No peers means every peer; no ports means every port.
type Rule struct {
	Peers []Peer
	Ports []Port
}

// EndpointRules are the compiled rules of one endpoint.
type EndpointRules struct {
	IngressIsolated bool
	EgressIsolated  bool
	Ingress         []Rule
	Egress          []Rule
	// Policies that select the endpoint, "namespace/name", sorted.
	Policies []string
}

// Group is a shared address group: the addresses of the endpoints one
// selector picks.
type Group struct {
	ID       string
	Selector string // human-readable: which endpoints it picks
	Members  []netip.Addr
}

// Result is the compiled form of a cluster's policies.
type Result struct {
	// Endpoints selected by at least one policy, by name. Endpoints not in
	// the map are not isolated.
	Endpoints map[string]EndpointRules
	// Groups referenced by rules, by ID.
	Groups map[string]Group
}

// Compile compiles valid policies against the endpoints and the labels of
// namespaces. It is a pure function: the same input gives the same output,
// so a change's effect is the difference of two results.
func Compile(pols []Policy, eps []Endpoint, nsLabels map[string]map[string]string) (Result, error) {
	c := &compiler{eps: eps, ns: nsLabels, res: Result{Endpoints: map[string]EndpointRules{}, Groups: map[string]Group{}}}
	slices.SortFunc(pols, func(a, b Policy) int { return cmp.Compare(a.Key(), b.Key()) })
	for _, p := range pols {
		if err := c.policy(p); err != nil {
			return Result{}, fmt.Errorf("policy %s: %w", p.Key(), err)
		}
	}
	// Keep only the groups some selected endpoint's rules refer to.
	used := map[string]bool{}
	for _, er := range c.res.Endpoints {
		for _, r := range slices.Concat(er.Ingress, er.Egress) {
			for _, p := range r.Peers {
				used[p.Group] = true
			}
		}
	}
	maps.DeleteFunc(c.res.Groups, func(id string, _ Group) bool { return !used[id] })
	return c.res, nil
}

type compiler struct {
	eps []Endpoint
	ns  map[string]map[string]string
	res Result
}

// appliesTo reports the policy types of p, defaulted as Kubernetes does.
func types(p Policy) (ingress, egress bool) {
	if len(p.Spec.PolicyTypes) == 0 {
		return true, len(p.Spec.Egress) > 0
	}
	for _, t := range p.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

func (c *compiler) policy(p Policy) error {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return fmt.Errorf("spec.podSelector: %w", err)
	}
	ingress, egress := types(p)
	var in, out []Rule
	if ingress {
		for i, r := range p.Spec.Ingress {
			rule, err := c.rule(p.Namespace, r.From, r.Ports)
			if err != nil {
				return fmt.Errorf("spec.ingress[%d]: %w", i, err)
			}
			in = append(in, rule)
		}
	}
	if egress {
		for i, r := range p.Spec.Egress {
			rule, err := c.rule(p.Namespace, r.To, r.Ports)
			if err != nil {
				return fmt.Errorf("spec.egress[%d]: %w", i, err)
			}
			out = append(out, rule)
		}
	}
	for _, e := range c.eps {
		if e.Namespace != p.Namespace || !sel.Matches(labels.Set(e.Labels)) {
			continue
		}
		er := c.res.Endpoints[e.Name]
		er.Policies = append(er.Policies, p.Key())
		if ingress {
			er.IngressIsolated = true
			er.Ingress = append(er.Ingress, in...)
		}
		if egress {
			er.EgressIsolated = true
			er.Egress = append(er.Egress, out...)
		}
		c.res.Endpoints[e.Name] = er
	}
	return nil
}

func (c *compiler) rule(policyNS string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) (Rule, error) {
	var r Rule
	for i, peer := range peers {
		if peer.IPBlock != nil {
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				return Rule{}, fmt.Errorf("peer %d: ipBlock.cidr: %w", i, err)
			}
			p := Peer{CIDR: cidr.Masked()}
			for _, e := range peer.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					return Rule{}, fmt.Errorf("peer %d: ipBlock.except: %w", i, err)
				}
				p.Except = append(p.Except, ep.Masked())
			}
			r.Peers = append(r.Peers, p)
			continue
		}
		id, err := c.group(policyNS, peer.PodSelector, peer.NamespaceSelector)
		if err != nil {
			return Rule{}, fmt.Errorf("peer %d: %w", i, err)
		}
		r.Peers = append(r.Peers, Peer{Group: id})
	}
	for i, p := range ports {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		port := Port{Protocol: proto}
		if p.Port != nil {
			if p.Port.StrVal != "" {
				return Rule{}, fmt.Errorf("ports[%d]: %q: %w", i, p.Port.StrVal, ErrNamedPort)
			}
			port.Port, port.EndPort = uint16(p.Port.IntVal), uint16(p.Port.IntVal)
			if p.EndPort != nil {
				port.EndPort = uint16(*p.EndPort)
			}
		}
		r.Ports = append(r.Ports, port)
	}
	return r, nil
}

// group returns the ID of the address group a peer selects, creating it.
// A nil namespaceSelector means the policy's own namespace; a nil
// podSelector means every pod of the selected namespaces.
func (c *compiler) group(policyNS string, podSel, nsSel *metav1.LabelSelector) (string, error) {
	pods := labels.Everything()
	if podSel != nil {
		s, err := metav1.LabelSelectorAsSelector(podSel)
		if err != nil {
			return "", fmt.Errorf("podSelector: %w", err)
		}
		pods = s
	}
	var nss labels.Selector
	key := "namespace " + policyNS
	if nsSel != nil {
		s, err := metav1.LabelSelectorAsSelector(nsSel)
		if err != nil {
			return "", fmt.Errorf("namespaceSelector: %w", err)
		}
		nss = s
		key = fmt.Sprintf("namespaces {%s}", s)
	}
	desc := fmt.Sprintf("pods {%s} in %s", pods, key)
	sum := sha256.Sum256([]byte(desc))
	id := "g" + hex.EncodeToString(sum[:6])
	if _, ok := c.res.Groups[id]; ok {
		return id, nil
	}
	g := Group{ID: id, Selector: desc}
	for _, e := range c.eps {
		inNS := e.Namespace == policyNS
		if nss != nil {
			inNS = e.Namespace != "" && nss.Matches(c.nsLabels(e.Namespace))
		}
		if inNS && pods.Matches(labels.Set(e.Labels)) {
			g.Members = append(g.Members, e.IPs...)
		}
	}
	slices.SortFunc(g.Members, func(a, b netip.Addr) int { return a.Compare(b) })
	g.Members = slices.Compact(g.Members)
	c.res.Groups[id] = g
	return id, nil
}

// NamespaceNameLabel is the label every Kubernetes namespace carries with
// its own name; namespaceSelector can match it even when the namespace
// has no other labels.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// nsLabels returns a namespace's labels with its implicit name label.
func (c *compiler) nsLabels(ns string) labels.Set {
	out := labels.Set{NamespaceNameLabel: ns}
	for k, v := range c.ns[ns] {
		if k != NamespaceNameLabel {
			out[k] = v
		}
	}
	return out
}
