// Package policy compiles Kubernetes NetworkPolicy into concrete rules:
// for every endpoint a policy selects, whether it is isolated in each
// direction and which peers and ports are allowed, with peers given as
// shared address groups (the set of IPs a selector picks) or CIDRs. Nodes
// then execute rules and never evaluate selectors, so an agent's work does
// not grow with the number of policies in the cluster.
//
//	pols, err := policy.ParseYAML(fileBytes)            // networking.k8s.io/v1, several documents
//	res, err := policy.Compile(pols, endpoints, namespaceLabels)
//	rules := res.Endpoints["pod-a"]                      // IngressIsolated, Ingress, ...
//	members := res.Groups[rules.Ingress[0].Peers[0].Group].Members
//
// Semantics are Kubernetes' own: an endpoint selected by any policy of a
// type is default-deny in that direction; what is allowed is the union of
// all rules of all policies selecting it; empty from/to means every peer,
// empty ports means every port, an empty rule list allows nothing; a peer
// with both podSelector and namespaceSelector selects pods matching both.
// Replies of allowed connections always pass (enforcement keeps conntrack).
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Policy is a NetworkPolicy as Skiff stores it.
type Policy struct {
	Namespace string
	Name      string
	Spec      networkingv1.NetworkPolicySpec
}

// Key is "namespace/name".
func (p Policy) Key() string { return p.Namespace + "/" + p.Name }

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// ParseYAML reads one or more YAML (or JSON) documents, each a
// networking.k8s.io/v1 NetworkPolicy, and validates them. A policy without
// a namespace is in "default". Errors name the document and the field.
func ParseYAML(data []byte) ([]Policy, error) {
	var out []Policy
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if np.APIVersion != "networking.k8s.io/v1" || np.Kind != "NetworkPolicy" {
			return nil, fmt.Errorf("document %d: apiVersion/kind %q/%q: want networking.k8s.io/v1 NetworkPolicy", i+1, np.APIVersion, np.Kind)
		}
		p := Policy{Namespace: np.Namespace, Name: np.Name, Spec: np.Spec}
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		if err := Validate(p); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func stripComments(s string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// Validate checks a policy; the error names the field and the reason.
func Validate(p Policy) error {
	where := "policy " + p.Key()
	switch {
	case p.Name == "" || len(p.Name) > 253 || !dnsSubdomain.MatchString(p.Name):
		return fmt.Errorf("%s: metadata.name: %q is not a valid name", where, p.Name)
	case len(p.Namespace) > 63 || !dnsLabel.MatchString(p.Namespace):
		return fmt.Errorf("%s: metadata.namespace: %q is not a valid namespace", where, p.Namespace)
	}
	if _, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector); err != nil {
		return fmt.Errorf("%s: spec.podSelector: %w", where, err)
	}
	for i, t := range p.Spec.PolicyTypes {
		if t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress {
			return fmt.Errorf("%s: spec.policyTypes[%d]: %q is not Ingress or Egress", where, i, t)
		}
	}
	for i, r := range p.Spec.Ingress {
		if err := validatePeers(r.From, fmt.Sprintf("spec.ingress[%d].from", i)); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if err := validatePorts(r.Ports, fmt.Sprintf("spec.ingress[%d].ports", i)); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	for i, r := range p.Spec.Egress {
		if err := validatePeers(r.To, fmt.Sprintf("spec.egress[%d].to", i)); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if err := validatePorts(r.Ports, fmt.Sprintf("spec.egress[%d].ports", i)); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

func validatePeers(peers []networkingv1.NetworkPolicyPeer, field string) error {
	for i, peer := range peers {
		f := fmt.Sprintf("%s[%d]", field, i)
		if peer.IPBlock != nil {
			if peer.PodSelector != nil || peer.NamespaceSelector != nil {
				return fmt.Errorf("%s: ipBlock cannot be combined with podSelector or namespaceSelector", f)
			}
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				return fmt.Errorf("%s.ipBlock.cidr: %q is not a CIDR", f, peer.IPBlock.CIDR)
			}
			for j, e := range peer.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					return fmt.Errorf("%s.ipBlock.except[%d]: %q is not a CIDR", f, j, e)
				}
				if !cidr.Masked().Contains(ep.Masked().Addr()) || ep.Bits() < cidr.Bits() {
					return fmt.Errorf("%s.ipBlock.except[%d]: %s is not inside %s", f, j, ep, cidr)
				}
			}
			continue
		}
		if peer.PodSelector == nil && peer.NamespaceSelector == nil {
			return fmt.Errorf("%s: a peer needs podSelector, namespaceSelector or ipBlock", f)
		}
		for name, sel := range map[string]*metav1.LabelSelector{"podSelector": peer.PodSelector, "namespaceSelector": peer.NamespaceSelector} {
			if sel == nil {
				continue
			}
			if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
				return fmt.Errorf("%s.%s: %w", f, name, err)
			}
		}
	}
	return nil
}

// ErrNamedPort is returned for named ports: Skiff endpoints carry no port
// names, so a policy using them cannot be compiled faithfully.
var ErrNamedPort = errors.New("named ports are not supported: Skiff endpoints carry no port names; use the port number")

func validatePorts(ports []networkingv1.NetworkPolicyPort, field string) error {
	for i, p := range ports {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p.Protocol != nil {
			switch *p.Protocol {
			case "TCP", "UDP", "SCTP":
			default:
				return fmt.Errorf("%s.protocol: %q is not TCP, UDP or SCTP", f, *p.Protocol)
			}
		}
		if p.Port != nil && p.Port.Type == intstr.String {
			return fmt.Errorf("%s.port: %q: %w", f, p.Port.StrVal, ErrNamedPort)
		}
		if p.Port != nil && (p.Port.IntVal < 1 || p.Port.IntVal > 65535) {
			return fmt.Errorf("%s.port: %d is not 1..65535", f, p.Port.IntVal)
		}
		if p.EndPort != nil {
			if p.Port == nil {
				return fmt.Errorf("%s.endPort: needs port", f)
			}
			if *p.EndPort < p.Port.IntVal || *p.EndPort > 65535 {
				return fmt.Errorf("%s.endPort: %d must be >= port %d and <= 65535", f, *p.EndPort, p.Port.IntVal)
			}
		}
	}
	return nil
}
