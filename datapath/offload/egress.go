package offload

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// egress makes each network's gateway (gws, by network) route what the
// network's egress allows, in the node's stack: the isolation and egress
// rules of internal/nl's firewall (table inet skiff) name the gateways
// (skg<VNI>), as they name the bridges on software nodes; then, when a
// network routes out, IPv4 forwarding on the node (never set back), and
// on each gateway forwarding on for snat and routed, off for none; IPv6
// forwarding too when a network that routes out has an IPv6 subnet. The
// rules go first: a gateway forwards only once they are in, and when
// they cannot be written every gateway's forwarding is turned off.
// Networks without a gateway here have nothing in the node's stack;
// a network's host port (hps) counts as its own, as on software nodes,
// and what a Service's DNAT sends from its gateway back into it (out of
// the gateway to a local backend, out of the host port to a remote one)
// keeps the client pod's address (the reply's reverse translation is
// in the flower rules, flower.CtNAT).
func (d *Datapath) egress(p plan.Plan, gws map[string]flower.Gateway, hps map[string]flower.HostPort) error {
	var devs []firewall.Device
	forward := map[string]bool{}
	var v6 bool
	for _, name := range slices.Sorted(maps.Keys(gws)) {
		n := p.Networks[name]
		gw := GatewayName(n.VNI)
		b := firewall.Device{Name: gw, Egress: n.Egress}
		if _, ok := hps[name]; ok {
			// The host port counts as the network's own. Its frames
			// never pass the gateway twice (the eswitch rules move
			// them), so none is left untracked (no HostMAC).
			// A pod's Service connection DNATed back into the
			// network (kube-proxy's rules) keeps the pod's address:
			// the backend's reply, which goes through the eswitch
			// straight to the client, gets its reverse translation
			// there (flower.CtNAT on the rules delivering to the
			// network's endpoints).
			b.HostPort = datapath.HostPortName(n.VNI)
		}
		if datapath.RoutesOut(n) {
			// What the node lets through goes past the network's
			// zone on the gateway port (flower.ReplyMark).
			b.ReplyMark = flower.ReplyMark
		}
		devs = append(devs, b)
		forward[gw] = datapath.RoutesOut(n)
		v6 = v6 || datapath.RoutesIPv6(n)
	}
	var errs []error
	if _, err := d.k.SetTable(firewall.Isolation(devs)); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: egress rules: %w", err))
		for gw := range forward {
			forward[gw] = false
		}
	} else if slices.Contains(slices.Collect(maps.Values(forward)), true) {
		// Replies come back through the underlay: the node routes.
		if err := firewall.EnableForwarding(d.k, d.log, v6); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %w", err))
		}
	}
	// After ip_forward, which sets every interface's forwarding.
	for _, gw := range slices.Sorted(maps.Keys(forward)) {
		if err := d.gatewayForwarding(gw, forward[gw]); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: forwarding on gateway %s: %w", gw, err))
		}
	}
	return errors.Join(errs...)
}

// gatewayForwarding sets a gateway device's forwarding, IPv4 and (where
// the node has IPv6) IPv6, writing only what differs. IPv6 forwarding is
// the node's (net.ipv6.conf.all); a device's own says whether it acts as
// a router (router flag in its neighbour advertisements, no router
// advertisements taken), and all.forwarding=1 sets every device's, a
// none network's gateway included, which this sets back.
func (d *Datapath) gatewayForwarding(gw string, on bool) error {
	return firewall.SetForwarding(d.k, gw, on)
}
