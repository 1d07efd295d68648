package nl

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// TapKind is the Kind of tap and tun links in Links.
const TapKind = "tuntap"

// Tap describes a persistent tap device a hypervisor attaches a VM to.
type Tap struct {
	Name  string
	Alias string // marks the tap as Skiff's
	MTU   int
	// Owner and Group may attach to the tap besides root (0: root only).
	Owner, Group uint32
}

// PlumbTap makes a persistent, single-queue tap (no packet information,
// virtio-net headers on) named t.Name in the namespace at ns ("" for the
// caller's), marked with t.Alias, with t.MTU, and up. It is idempotent: a
// tap that is already there is kept (a hypervisor may hold it) and only
// its MTU and state are made to match. A link of that name without
// t.Alias is someone else's, and one that is not a tap is not this
// endpoint's: both are refused. On error nothing it made stays.
func PlumbTap(ns string, t Tap) error {
	k, err := Open(Options{NetNS: ns})
	if err != nil {
		return err
	}
	defer Close(k)
	r := k.(*real)
	l, err := r.h.LinkByName(t.Name)
	var nf netlink.LinkNotFoundError
	created := false
	fail := func(err error) error {
		if created {
			return errors.Join(err, DeleteByName(k, t.Name))
		}
		return err
	}
	switch {
	case errors.As(err, &nf):
		// The tap is created by /dev/net/tun in the namespace of the
		// thread that opens it.
		r.w()
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: t.Name, MTU: t.MTU}, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR, Owner: t.Owner, Group: t.Group}
		if err := InNetNS(ns, func() error { return r.h.LinkAdd(tap) }); err != nil {
			return fmt.Errorf("nl: add tap %s: %w", t.Name, err)
		}
		created = true
		if l, err = r.h.LinkByName(t.Name); err != nil {
			return fail(fmt.Errorf("nl: find tap %s: %w", t.Name, err))
		}
		if err := r.h.LinkSetAlias(l, t.Alias); err != nil {
			return fail(fmt.Errorf("nl: mark %s: %w", t.Name, err))
		}
	case err != nil:
		return fmt.Errorf("nl: %s: %w", t.Name, err)
	case l.Attrs().Alias != t.Alias:
		return fmt.Errorf("nl: %s exists and is not this endpoint's (alias %q); leaving it alone", t.Name, l.Attrs().Alias)
	case l.Type() != TapKind:
		return fmt.Errorf("nl: %s is a %s, not a tap; leaving it alone", t.Name, l.Type())
	}
	if t.MTU > 0 && l.Attrs().MTU != t.MTU {
		r.w()
		if err := r.h.LinkSetMTU(l, t.MTU); err != nil {
			return fail(fmt.Errorf("nl: set %s mtu: %w", t.Name, err))
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		r.w()
		if err := r.h.LinkSetUp(l); err != nil {
			return fail(fmt.Errorf("nl: set %s up: %w", t.Name, err))
		}
	}
	return nil
}
