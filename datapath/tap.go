package datapath

import (
	"errors"
	"strings"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// PlumbTap makes the tap of a VM port for the kernel datapaths: named
// HostIfName and marked with HostIfAlias in the namespace at ns ("" for
// the caller's), with the network's MTU, up. A hypervisor attaches the
// guest to it by name. Idempotent (a tap a hypervisor holds is kept); on
// error nothing it made stays.
func PlumbTap(ns string, req PlumbRequest) (Plumbed, error) {
	e := req.Endpoint
	out := Plumbed{HostIf: HostIfName(e.Name), MTU: EndpointMTU(req.Network, req.MTU), Gateways: Gateways(e, req.Network)}
	if err := nl.PlumbTap(ns, nl.Tap{Name: out.HostIf, Alias: HostIfAlias(e.Name), MTU: out.MTU}); err != nil {
		return Plumbed{}, err
	}
	return out, nil
}

// UnplumbTap deletes a VM port's tap, in the namespace at ns ("" for the
// caller's); a hypervisor still attached loses its link. A tap that is not
// there is not an error.
func UnplumbTap(ns, endpoint string) error {
	k, err := nl.Open(nl.Options{NetNS: ns})
	if err != nil {
		return err
	}
	defer nl.Close(k)
	return nl.DeleteByName(k, HostIfName(endpoint))
}

// StaleTaps returns the indexes of the VM port taps among links whose
// endpoint keep does not know: Skiff's taps (named by HostIfName, marked
// with HostIfAlias) left by a port deleted while the agent was down.
func StaleTaps(links []nl.Link, keep func(endpoint string) bool) []nl.Link {
	var out []nl.Link
	for _, l := range links {
		ep, ok := strings.CutPrefix(l.Alias, HostIfAlias(""))
		if !ok || l.Kind != nl.TapKind || l.Name != HostIfName(ep) || keep(ep) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// DeleteStaleTaps deletes the stale taps (StaleTaps) of namespace ns
// ("" for the caller's) and returns their names.
func DeleteStaleTaps(ns string, keep func(endpoint string) bool) ([]string, error) {
	k, err := nl.Open(nl.Options{NetNS: ns})
	if err != nil {
		return nil, err
	}
	defer nl.Close(k)
	links, err := k.Links()
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	for _, l := range StaleTaps(links, keep) {
		names = append(names, l.Name)
		errs = append(errs, k.DeleteLink(l.Index))
	}
	return names, errors.Join(errs...)
}
