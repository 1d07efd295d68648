package nl

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Helpers made of a Kernel's calls, so they work on a fake as on the real
// kernel.

// DeleteByName deletes the link of that name; a link that is not there
// (or goes between the lookup and the delete) is no error.
func DeleteByName(k Kernel, name string) error {
	l, err := k.LinkByName(name)
	if errors.Is(err, ErrNoLink) {
		return nil
	}
	if err != nil {
		return err
	}
	return k.DeleteLink(l.Index)
}

// LinkRoute is a route through a link as a link's configuration names
// it: to Dst (the default route of Gw's family when Dst is not valid)
// via Gw (on link when Gw is not valid).
type LinkRoute struct {
	Dst netip.Prefix
	Gw  netip.Addr
}

// LinkConfig is what a link gets: MAC (kept when empty), MTU (kept when
// 0), addresses, routes; it is set up.
type LinkConfig struct {
	MAC    string
	MTU    int
	Addrs  []netip.Prefix
	Routes []LinkRoute
}

// Configure gives the link of that name its MAC and MTU (where they
// differ), its addresses, sets it up and adds its routes (protocol:
// the kernel's default). Idempotent: addresses and routes are replaced.
func Configure(k Kernel, name string, c LinkConfig) error {
	l, err := k.LinkByName(name)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("nl: configure %s in %s: %w", name, where(k.Path()), err) }
	if c.MAC != "" && !strings.EqualFold(l.MAC, c.MAC) {
		if err := k.SetMAC(l.Index, c.MAC); err != nil {
			return fail(err)
		}
	}
	if c.MTU > 0 && l.MTU != c.MTU {
		if err := k.SetMTU(l.Index, c.MTU); err != nil {
			return fail(err)
		}
	}
	for _, a := range c.Addrs {
		if err := k.AddAddr(l.Index, a); err != nil {
			return fail(err)
		}
	}
	if err := k.SetUp(l.Index); err != nil {
		return fail(err)
	}
	for _, r := range c.Routes {
		dst := r.Dst
		switch {
		case dst.IsValid():
			dst = dst.Masked()
		case !r.Gw.IsValid():
			return fail(fmt.Errorf("route with neither destination nor gateway"))
		case r.Gw.Is4():
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		default:
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		if err := k.ReplaceRoute(Route{Dst: dst, Gw: r.Gw, LinkIndex: l.Index}); err != nil {
			return fail(err)
		}
	}
	return nil
}

// Iface is a link as a configuration reads it back: name, MAC, MTU,
// addresses (link-local ones excluded) and the gateways of its default
// routes.
type Iface struct {
	Name    string
	MAC     string
	MTU     int
	Addrs   []netip.Prefix
	Gateway []netip.Addr
}

// Inspect reads the link of that name back as an Iface.
func Inspect(k Kernel, name string) (Iface, error) {
	l, err := k.LinkByName(name)
	if err != nil {
		return Iface{}, err
	}
	out := Iface{Name: name, MAC: l.MAC, MTU: l.MTU}
	if out.Addrs, err = k.Addrs(l.Index); err != nil {
		return Iface{}, err
	}
	routes, err := k.LinkRoutes(l.Index)
	if err != nil {
		return Iface{}, err
	}
	for _, r := range routes {
		if r.Gw.IsValid() && r.Dst.Bits() == 0 {
			out.Gateway = append(out.Gateway, r.Gw)
		}
	}
	return out, nil
}
