package flower

import (
	"net/netip"
	"strconv"
)

// Action is one tc action.
type Action struct {
	// Kind is one of "tunnel_key set", "tunnel_key unset",
	// "mirred redirect", "mirred mirror".
	Kind string
	// tunnel_key set.
	VNI      uint32
	Src, Dst netip.Addr
	DstPort  uint16
	// mirred: the egress device.
	Dev string
}

// Action kinds.
const (
	TunnelSet   = "tunnel_key set"
	TunnelUnset = "tunnel_key unset"
	Redirect    = "mirred redirect"
	Mirror      = "mirred mirror"
	Continue    = "continue" // gact: go on with the next filter
	// IngressRedirect moves the packet to the ingress of Dev.
	IngressRedirect = "mirred ingress redirect"
	// CtNAT is act_ct in the default zone (netfilter's own, where
	// kube-proxy's DNAT of a Service connection lives) with nat and no
	// commit: a packet of a translated connection gets the
	// connection's translation (a reply from a Service's backend gets
	// the Service's address and port back as its source); any other
	// packet passes unchanged and leaves no conntrack entry; pipe.
	CtNAT = "ct nat"
)

func (a Action) String() string { return string(a.appendTo(nil)) }

func (a Action) appendTo(b []byte) []byte {
	b = append(b, a.Kind...)
	switch a.Kind {
	case TunnelSet:
		b = append(b, " id "...)
		b = strconv.AppendUint(b, uint64(a.VNI), 10)
		b = append(b, " src_ip "...)
		b = a.Src.AppendTo(b)
		b = append(b, " dst_ip "...)
		b = a.Dst.AppendTo(b)
		b = append(b, " dst_port "...)
		b = strconv.AppendUint(b, uint64(a.DstPort), 10)
	case TunnelUnset, Continue, CtNAT:
	default:
		b = append(b, " dev "...)
		b = append(b, a.Dev...)
	}
	return b
}
