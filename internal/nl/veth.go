package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Veth describes a veth pair whose peer goes into another namespace.
type Veth struct {
	Name     string // host side
	Alias    string // marks the host side as Skiff's
	MTU      int
	PeerName string // name of the peer inside PeerNS
	PeerNS   string // path of the peer's namespace
}

// Iface is the configuration of an interface inside a namespace.
type Iface struct {
	Name    string
	MAC     string
	MTU     int
	Addrs   []netip.Prefix
	Gateway []netip.Addr // default routes, at most one per family
}

// Counters are an interface's counters.
type Counters struct {
	RxPackets, RxBytes, RxDropped uint64
	TxPackets, TxBytes, TxDropped uint64
}

// VethAPI creates endpoint interfaces. It is part of the real kernel only
// (see Kernel for what the datapath reconciles).
type VethAPI interface {
	// AddVeth creates the pair, moving the peer into PeerNS under PeerName.
	AddVeth(v Veth) error
	// Stats returns the counters of every link by name.
	Stats() (map[string]Counters, error)
}

// AddVeth implements VethAPI. The pair is made in one request, its peer
// created straight in v.PeerNS under its own name (no move between
// namespaces, which costs the kernel an RCU grace period), so a failure
// leaves nothing behind; a failure to mark the host side deletes the
// pair.
func (k *real) AddVeth(v Veth) error {
	ns, err := netns.GetFromPath(v.PeerNS)
	if err != nil {
		return fmt.Errorf("nl: namespace %s: %w", v.PeerNS, err)
	}
	defer ns.Close()
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = v.Name, v.MTU
	veth := &netlink.Veth{LinkAttrs: la, PeerName: v.PeerName, PeerNamespace: netlink.NsFd(int(ns))}
	if v.MTU > 0 {
		veth.PeerMTU = uint32(v.MTU)
	}
	if err := k.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("nl: add veth %s (peer %s in %s): %w", v.Name, v.PeerName, v.PeerNS, err)
	}
	host, err := k.h.LinkByName(v.Name)
	if err != nil {
		return fmt.Errorf("nl: find veth %s: %w", v.Name, err)
	}
	if err := k.h.LinkSetAlias(host, v.Alias); err != nil {
		_ = k.h.LinkDel(host)
		return fmt.Errorf("nl: mark %s: %w", v.Name, err)
	}
	return nil
}

// Configure sets an interface of this namespace up with its MAC, MTU,
// addresses and default routes. Idempotent.
func Configure(k Kernel, i Iface) error {
	r, ok := k.(*real)
	if !ok {
		return errors.New("nl: Configure needs the real kernel")
	}
	l, err := r.h.LinkByName(i.Name)
	if err != nil {
		return fmt.Errorf("nl: %s: %w", i.Name, err)
	}
	r.w()
	if i.MAC != "" {
		mac, err := net.ParseMAC(i.MAC)
		if err != nil {
			return fmt.Errorf("nl: mac %q: %w", i.MAC, err)
		}
		if err := r.h.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("nl: set %s mac: %w", i.Name, err)
		}
	}
	if i.MTU > 0 {
		if err := r.h.LinkSetMTU(l, i.MTU); err != nil {
			return fmt.Errorf("nl: set %s mtu: %w", i.Name, err)
		}
	}
	for _, a := range i.Addrs {
		ipn := &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}
		addr := &netlink.Addr{IPNet: ipn}
		if a.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := r.h.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("nl: add %s to %s: %w", a, i.Name, err)
		}
	}
	if err := r.h.LinkSetUp(l); err != nil {
		return fmt.Errorf("nl: set %s up: %w", i.Name, err)
	}
	for _, gw := range i.Gateway {
		route := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()}
		if err := r.h.RouteReplace(route); err != nil {
			return fmt.Errorf("nl: default route via %s on %s: %w", gw, i.Name, err)
		}
	}
	return nil
}

// DeleteByName deletes a link of this namespace by name; a missing link is
// not an error.
func DeleteByName(k Kernel, name string) error {
	r, ok := k.(*real)
	if !ok {
		return errors.New("nl: DeleteByName needs the real kernel")
	}
	l, err := r.h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("nl: %s: %w", name, err)
	}
	r.w()
	if err := r.h.LinkDel(l); err != nil {
		if errors.Is(err, unix.ENODEV) {
			// Gone between the lookup and the delete: a veth whose peer's
			// namespace the runtime deleted goes with it, asynchronously.
			return nil
		}
		return fmt.Errorf("nl: delete %s: %w", name, err)
	}
	return nil
}

func (k *real) Stats() (map[string]Counters, error) {
	ls, err := dump(k.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("nl: list links: %w", err)
	}
	out := map[string]Counters{}
	for _, l := range ls {
		s := l.Attrs().Statistics
		if s == nil {
			continue
		}
		out[l.Attrs().Name] = Counters{RxPackets: s.RxPackets, RxBytes: s.RxBytes, RxDropped: s.RxDropped,
			TxPackets: s.TxPackets, TxBytes: s.TxBytes, TxDropped: s.TxDropped}
	}
	return out, nil
}

// Inspect reads an interface of this namespace back as an Iface: MAC, MTU,
// global addresses and the gateways of its default routes.
func Inspect(k Kernel, name string) (Iface, error) {
	r, ok := k.(*real)
	if !ok {
		return Iface{}, errors.New("nl: Inspect needs the real kernel")
	}
	l, err := r.h.LinkByName(name)
	if err != nil {
		return Iface{}, fmt.Errorf("nl: %s: %w", name, err)
	}
	out := Iface{Name: name, MAC: l.Attrs().HardwareAddr.String(), MTU: l.Attrs().MTU}
	addrs, err := dump(func() ([]netlink.Addr, error) { return r.h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return Iface{}, fmt.Errorf("nl: addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Unmap().IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		out.Addrs = append(out.Addrs, netip.PrefixFrom(ip.Unmap(), bits))
	}
	routes, err := dump(func() ([]netlink.Route, error) { return r.h.RouteList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return Iface{}, fmt.Errorf("nl: routes of %s: %w", name, err)
	}
	for _, rt := range routes {
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok && (rt.Dst == nil || isDefault(rt.Dst)) {
			out.Gateway = append(out.Gateway, gw.Unmap())
		}
	}
	return out, nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// Close releases the handle of a kernel Open returned. Kernels that are
// not the real one are left alone.
func Close(k Kernel) {
	if r, ok := k.(*real); ok {
		r.h.Close()
	}
}

// PlumbVeth makes a local endpoint's veth pair: v.Name (marked with
// v.Alias) here, its peer in v.PeerNS configured as in says. It is
// idempotent: a pair that is already there keeps its interfaces and only
// has its configuration made to match. A link named v.Name without
// v.Alias is someone else's and is refused. On error nothing it made
// stays.
func PlumbVeth(k Kernel, v Veth, in Iface) error {
	r, ok := k.(*real)
	if !ok {
		return errors.New("nl: PlumbVeth needs the real kernel")
	}
	in.Name = v.PeerName
	if l, err := r.h.LinkByName(v.Name); err == nil {
		if l.Attrs().Alias != v.Alias {
			return fmt.Errorf("nl: %s exists and is not this endpoint's (alias %q); leaving it alone", v.Name, l.Attrs().Alias)
		}
		present, err := linkIn(v.PeerNS, v.PeerName)
		if err != nil {
			return err
		}
		if present {
			return configureIn(v.PeerNS, in)
		}
		// Half a pair (its peer's namespace is gone): start again.
		r.w()
		if err := r.h.LinkDel(l); err != nil {
			return fmt.Errorf("nl: delete stale %s: %w", v.Name, err)
		}
	}
	if err := r.AddVeth(v); err != nil {
		return err
	}
	if err := configureIn(v.PeerNS, in); err != nil {
		return errors.Join(err, DeleteByName(k, v.Name))
	}
	return nil
}

// linkIn reports whether namespace path has a link named name.
func linkIn(path, name string) (bool, error) {
	pk, err := Open(Options{NetNS: path})
	if err != nil {
		return false, err
	}
	defer Close(pk)
	_, err = pk.(*real).h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &nf):
		return false, nil
	}
	return false, fmt.Errorf("nl: %s in %s: %w", name, path, err)
}

func configureIn(path string, in Iface) error {
	pk, err := Open(Options{NetNS: path})
	if err != nil {
		return err
	}
	defer Close(pk)
	return Configure(pk, in)
}
