package datapath

import (
	"errors"
	"fmt"
	"strings"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// PlumbTap makes the tap of a VM port for the kernel datapaths, in the
// namespace at ns (opened with open for the call, as PlumbVeth's): named
// HostIfName and marked with HostIfAlias, with the network's MTU, up. A hypervisor attaches the guest to it by name. It is idempotent: a
// tap that is already there is kept (a hypervisor may hold it) and only
// its MTU and state are made to match. A link of that name without the
// endpoint's alias is someone else's, and one that is not a tap is not
// this endpoint's: both are refused. On error nothing it made stays.
func PlumbTap(open nl.OpenFunc, ns string, req PlumbRequest) (Plumbed, error) {
	k, err := open(ns)
	if err != nil {
		return Plumbed{}, err
	}
	defer k.Close()
	e := req.Endpoint
	out := Plumbed{HostIf: HostIfName(e.Name), MTU: EndpointMTU(req.Network, req.MTU), Gateways: Gateways(e, req.Network)}
	alias := HostIfAlias(e.Name)
	l, err := k.LinkByName(out.HostIf)
	created := false
	switch {
	case errors.Is(err, nl.ErrNoLink):
		if err := k.AddTap(nl.Tap{Name: out.HostIf, Alias: alias, MTU: out.MTU}); err != nil {
			return Plumbed{}, err
		}
		created = true
		if l, err = k.LinkByName(out.HostIf); err != nil {
			return Plumbed{}, errors.Join(err, nl.DeleteByName(k, out.HostIf))
		}
	case err != nil:
		return Plumbed{}, err
	case l.Alias != alias:
		return Plumbed{}, fmt.Errorf("%s exists and is not this endpoint's (alias %q); leaving it alone", out.HostIf, l.Alias)
	case l.Kind != nl.TapKind:
		return Plumbed{}, fmt.Errorf("%s is a %s, not a tap; leaving it alone", out.HostIf, l.Kind)
	}
	fail := func(err error) (Plumbed, error) {
		if created {
			err = errors.Join(err, nl.DeleteByName(k, out.HostIf))
		}
		return Plumbed{}, err
	}
	if out.MTU > 0 && l.MTU != out.MTU {
		if err := k.SetMTU(l.Index, out.MTU); err != nil {
			return fail(err)
		}
	}
	if !l.Up {
		if err := k.SetUp(l.Index); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

// UnplumbTap deletes a VM port's tap in the namespace at ns (opened with
// open for the call); a hypervisor still attached loses its link. A tap
// that is not there is not an error.
func UnplumbTap(open nl.OpenFunc, ns, endpoint string) error {
	k, err := open(ns)
	if err != nil {
		return err
	}
	defer k.Close()
	return nl.DeleteByName(k, HostIfName(endpoint))
}

// StaleTaps returns the VM port taps among links whose endpoint keep
// does not know: Skiff's taps (named by HostIfName, marked with
// HostIfAlias) left by a port deleted while the agent was down.
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

// DeleteStaleTaps deletes the stale taps (StaleTaps) of k and returns
// their names.
func DeleteStaleTaps(k nl.Kernel, keep func(endpoint string) bool) ([]string, error) {
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
