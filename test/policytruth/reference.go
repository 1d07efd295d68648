package policytruth

import (
	"fmt"
	"net/netip"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Probe is one kind of packet sent between pods: TCP, UDP or SCTP to a
// port, or an ICMP echo (Port 0).
type Probe struct {
	Proto string // TCP, UDP, SCTP or ICMP
	Port  int
}

// Probes is the full probe list where the kernel has no SCTP: the ports
// the cases' rules name and their edges.
var Probes = []Probe{{"TCP", 53}, {"TCP", 80}, {"TCP", 443}, {"TCP", 8080}, {"UDP", 53}, {"UDP", 5353}, {"ICMP", 0}}

// SCTPProbes are added to a probe list where the kernel has SCTP (the
// kernel VM; the development kernel has no sctp module). On port 80 the
// cases both allow SCTP where TCP is denied (an SCTP entry without a
// port) and deny it where TCP is allowed (an entry without a protocol is
// TCP), so that a datapath taking one protocol for the other fails.
var SCTPProbes = []Probe{{"SCTP", 80}}

// Key names one probe between two pods in a matrix.
func Key(src, dst *Pod, pr Probe) string {
	if pr.Proto == "ICMP" {
		return fmt.Sprintf("%s -> %s ICMP", src.Name, dst.Name)
	}
	return fmt.Sprintf("%s -> %s %s/%d", src.Name, dst.Name, pr.Proto, pr.Port)
}

// Render replaces each {{NAME}} of a case's YAML by pod NAME's address
// (and {{subnet}}, {{all}} and {{bits}} by those of the pods' address
// family, IPv6 when the first pod's address is) and decodes the policies (strictly: an unknown field is an error). It
// returns the document as it is to be applied.
func (c Case) Render(pods []*Pod) (string, []networkingv1.NetworkPolicy, error) {
	r := []string{"{{subnet}}", Subnet, "{{all}}", "0.0.0.0/0", "{{bits}}", "32"}
	if len(pods) > 0 && strings.Contains(pods[0].IP, ":") {
		r = []string{"{{subnet}}", Subnet6, "{{all}}", "::/0", "{{bits}}", "128"}
	}
	for _, p := range pods {
		r = append(r, "{{"+p.Name+"}}", p.IP)
	}
	doc := strings.NewReplacer(r...).Replace(c.YAML)
	if strings.Contains(doc, "{{") {
		return "", nil, fmt.Errorf("%s: a placeholder names no pod:\n%s", c.Name, doc)
	}
	var pols []networkingv1.NetworkPolicy
	for _, d := range strings.Split(doc, "\n---\n") {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(d), &np); err != nil {
			return "", nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		pols = append(pols, np)
	}
	return doc, pols, nil
}

// Expected is the matrix Kubernetes' rules give for every ordered pair of
// distinct pods and every probe: Key → allowed.
func Expected(pols []networkingv1.NetworkPolicy, pods []*Pod, probes []Probe) map[string]bool {
	m := map[string]bool{}
	for _, src := range pods {
		for _, dst := range pods {
			if src == dst {
				continue
			}
			for _, pr := range probes {
				m[Key(src, dst, pr)] = Allows(pols, src, dst, pr)
			}
		}
	}
	return m
}

// Allows reads the Kubernetes NetworkPolicy rules literally: a flow
// passes when the source may send it (egress) and the destination may
// receive it (ingress).
func Allows(pols []networkingv1.NetworkPolicy, src, dst *Pod, pr Probe) bool {
	return direction(pols, dst, src, pr, true) && direction(pols, src, dst, pr, false)
}

// direction: may pod receive from (ingress) or send to (egress) peer?
func direction(pols []networkingv1.NetworkPolicy, pod, peer *Pod, pr Probe, ingress bool) bool {
	selected := false
	for _, p := range pols {
		if p.Namespace != pod.Namespace || !selects(&p.Spec.PodSelector, pod.Labels) {
			continue
		}
		in, out := false, false
		if len(p.Spec.PolicyTypes) == 0 {
			in, out = true, len(p.Spec.Egress) > 0
		}
		for _, ty := range p.Spec.PolicyTypes {
			in = in || ty == networkingv1.PolicyTypeIngress
			out = out || ty == networkingv1.PolicyTypeEgress
		}
		if (ingress && !in) || (!ingress && !out) {
			continue
		}
		selected = true
		if ingress {
			for _, r := range p.Spec.Ingress {
				if peersMatch(r.From, p.Namespace, peer) && portsMatch(r.Ports, pr) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if peersMatch(r.To, p.Namespace, peer) && portsMatch(r.Ports, pr) {
					return true
				}
			}
		}
	}
	return !selected
}

func selects(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		panic(err)
	}
	return sel.Matches(labels.Set(l))
}

func peersMatch(peers []networkingv1.NetworkPolicyPeer, policyNS string, peer *Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, x := range peers {
		switch {
		case x.IPBlock != nil:
			ip := netip.MustParseAddr(peer.IP)
			if !netip.MustParsePrefix(x.IPBlock.CIDR).Contains(ip) {
				continue
			}
			excluded := false
			for _, e := range x.IPBlock.Except {
				excluded = excluded || netip.MustParsePrefix(e).Contains(ip)
			}
			if !excluded {
				return true
			}
		default:
			nsOK := peer.Namespace == policyNS
			if x.NamespaceSelector != nil {
				nl := map[string]string{"kubernetes.io/metadata.name": peer.Namespace}
				for k, v := range Namespaces[peer.Namespace] {
					nl[k] = v
				}
				nsOK = selects(x.NamespaceSelector, nl)
			}
			podOK := x.PodSelector == nil || selects(x.PodSelector, peer.Labels)
			if nsOK && podOK {
				return true
			}
		}
	}
	return false
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, pr Probe) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		if proto != pr.Proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if int32(pr.Port) >= p.Port.IntVal && int32(pr.Port) <= end {
			return true
		}
	}
	return false
}
