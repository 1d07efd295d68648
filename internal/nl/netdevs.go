package nl

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netdev is a network device as moving it between namespaces sees it.
type Netdev struct {
	Index int
	Name  string
	Alias string
	MAC   string
	MTU   int
	Up    bool
}

// LinkRoute is a route through a device: to Dst (the default route of
// Gw's family when Dst is not valid) via Gw (on-link when Gw is not
// valid).
type LinkRoute struct {
	Dst netip.Prefix
	Gw  netip.Addr
}

// LinkConfig is what a device gets in its namespace: MAC (kept when
// empty), MTU (kept when 0), addresses, routes; it is set up.
type LinkConfig struct {
	MAC    string
	MTU    int
	Addrs  []netip.Prefix
	Routes []LinkRoute
}

// Errors Netdevs wraps.
var (
	// ErrNoNetNS: the namespace path does not exist (the namespace was
	// destroyed, or never was).
	ErrNoNetNS = errors.New("network namespace does not exist")
	// ErrNoLink: no device of that name in the namespace.
	ErrNoLink = errors.New("no such device")
)

// Netdevs reaches the devices of any network namespace, named by path
// (/var/run/netns/NAME, /proc/PID/ns/net; "" is the caller's). Each call
// is one short netlink conversation in that namespace, on a socket
// opened there (no thread changes namespace). Safe for concurrent use.
type Netdevs struct{}

func handleIn(ns string) (*netlink.Handle, error) {
	if ns == "" {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("nl: netlink handle: %w", err)
		}
		return h, nil
	}
	nh, err := netns.GetFromPath(ns)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("nl: namespace %s: %w", ns, ErrNoNetNS)
	}
	if err != nil {
		return nil, fmt.Errorf("nl: namespace %s: %w", ns, err)
	}
	defer nh.Close()
	h, err := netlink.NewHandleAt(nh, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("nl: netlink handle in %s: %w", ns, err)
	}
	return h, nil
}

func where(ns string) string {
	if ns == "" {
		return "this namespace"
	}
	return ns
}

// linkIn opens a handle in ns and finds the device name there.
func netdevIn(ns, name string) (*netlink.Handle, netlink.Link, error) {
	h, err := handleIn(ns)
	if err != nil {
		return nil, nil, err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		h.Close()
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil, fmt.Errorf("nl: %s in %s: %w", name, where(ns), ErrNoLink)
		}
		return nil, nil, fmt.Errorf("nl: %s in %s: %w", name, where(ns), err)
	}
	return h, l, nil
}

func netdevOf(l netlink.Link) Netdev {
	a := l.Attrs()
	return Netdev{Index: a.Index, Name: a.Name, Alias: a.Alias, MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
}

// Get returns the device name of namespace ns; an error wrapping ErrNoLink
// when there is none, ErrNoNetNS when the namespace is gone.
func (Netdevs) Get(ns, name string) (Netdev, error) {
	h, l, err := netdevIn(ns, name)
	if err != nil {
		return Netdev{}, err
	}
	defer h.Close()
	return netdevOf(l), nil
}

// List returns the devices of namespace ns.
func (Netdevs) List(ns string) ([]Netdev, error) {
	h, err := handleIn(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ls, err := dump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("nl: list links in %s: %w", where(ns), err)
	}
	out := make([]Netdev, 0, len(ls))
	for _, l := range ls {
		out = append(out, netdevOf(l))
	}
	return out, nil
}

// do runs f on device name of namespace ns.
func do(ns, name, what string, f func(h *netlink.Handle, l netlink.Link) error) error {
	h, l, err := netdevIn(ns, name)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := f(h, l); err != nil {
		return fmt.Errorf("nl: %s %s in %s: %w", what, name, where(ns), err)
	}
	return nil
}

// SetAlias sets a device's alias ("" clears it).
func (Netdevs) SetAlias(ns, name, alias string) error {
	return do(ns, name, "set alias of", func(h *netlink.Handle, l netlink.Link) error { return h.LinkSetAlias(l, alias) })
}

// SetDown sets a device administratively down.
func (Netdevs) SetDown(ns, name string) error {
	return do(ns, name, "set down", func(h *netlink.Handle, l netlink.Link) error { return h.LinkSetDown(l) })
}

// SetMTU sets a device's MTU.
func (Netdevs) SetMTU(ns, name string, mtu int) error {
	return do(ns, name, "set mtu of", func(h *netlink.Handle, l netlink.Link) error { return h.LinkSetMTU(l, mtu) })
}

// Rename renames a device, setting it down first (the kernel renames
// only devices that are down).
func (Netdevs) Rename(ns, name, newName string) error {
	return do(ns, name, "rename to "+newName, func(h *netlink.Handle, l netlink.Link) error {
		if l.Attrs().Flags&net.FlagUp != 0 {
			if err := h.LinkSetDown(l); err != nil {
				return err
			}
		}
		return h.LinkSetName(l, newName)
	})
}

// Move moves device name from namespace fromNS into toNS ("" for either
// is the caller's), keeping its name; the kernel sets it down and drops
// its addresses and routes on the way. It fails (EEXIST) when toNS has a
// device of that name.
func (Netdevs) Move(fromNS, name, toNS string) error {
	var target netns.NsHandle
	var err error
	if toNS == "" {
		target, err = netns.Get()
	} else {
		target, err = netns.GetFromPath(toNS)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("nl: namespace %s: %w", toNS, ErrNoNetNS)
		}
	}
	if err != nil {
		return fmt.Errorf("nl: namespace %s: %w", where(toNS), err)
	}
	defer target.Close()
	return do(fromNS, name, "move to "+where(toNS)+":", func(h *netlink.Handle, l netlink.Link) error {
		return h.LinkSetNsFd(l, int(target))
	})
}

// Configure gives device name of namespace ns its MAC, MTU and addresses,
// sets it up and adds its routes. Idempotent (addresses and routes are
// replaced).
func (Netdevs) Configure(ns, name string, c LinkConfig) error {
	return do(ns, name, "configure", func(h *netlink.Handle, l netlink.Link) error {
		if c.MAC != "" {
			mac, err := net.ParseMAC(c.MAC)
			if err != nil {
				return fmt.Errorf("mac %q: %w", c.MAC, err)
			}
			if l.Attrs().HardwareAddr.String() != mac.String() {
				if err := h.LinkSetHardwareAddr(l, mac); err != nil {
					return fmt.Errorf("set mac %s: %w", mac, err)
				}
			}
		}
		if c.MTU > 0 && l.Attrs().MTU != c.MTU {
			if err := h.LinkSetMTU(l, c.MTU); err != nil {
				return fmt.Errorf("set mtu %d: %w", c.MTU, err)
			}
		}
		for _, a := range c.Addrs {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
			if a.Addr().Is6() {
				addr.Flags = unix.IFA_F_NODAD
			}
			if err := h.AddrReplace(l, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set up: %w", err)
		}
		for _, r := range c.Routes {
			rt := &netlink.Route{LinkIndex: l.Attrs().Index}
			if r.Gw.IsValid() {
				rt.Gw = r.Gw.AsSlice()
			}
			if r.Dst.IsValid() {
				rt.Dst = &net.IPNet{IP: r.Dst.Masked().Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())}
			} else if !r.Gw.IsValid() {
				return fmt.Errorf("route with neither destination nor gateway")
			} else if r.Gw.Is4() {
				rt.Dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
			} else {
				rt.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			}
			if !r.Gw.IsValid() {
				rt.Scope = netlink.SCOPE_LINK
			}
			if err := h.RouteReplace(rt); err != nil {
				return fmt.Errorf("route %s via %s: %w", r.Dst, r.Gw, err)
			}
		}
		return nil
	})
}
