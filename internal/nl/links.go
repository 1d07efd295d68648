package nl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

func linkOf(l netlink.Link) Link {
	a := l.Attrs()
	x := Link{Index: a.Index, Name: a.Name, Kind: l.Type(), Alias: a.Alias, MTU: a.MTU,
		Up: a.Flags&net.FlagUp != 0, Master: a.MasterIndex, MAC: a.HardwareAddr.String()}
	if a.PhysSwitchID != 0 {
		x.SwitchID = strconv.FormatUint(uint64(a.PhysSwitchID), 16)
	}
	if v, ok := l.(*netlink.Vxlan); ok {
		x.VNI = uint32(v.VxlanId)
		x.Port = v.Port
		x.Learning = v.Learning
		x.External = v.FlowBased
		if ip, ok := addrFrom(v.SrcAddr); ok {
			x.Local = ip
		}
	}
	if v, ok := l.(*netlink.Vlan); ok {
		x.VID, x.Parent = uint16(v.VlanId), a.ParentIndex
	}
	return x
}

// Links dumps the namespace's links (linkDump).
func (k *real) Links() ([]Link, error) {
	ls, err := k.linkDump()
	if err != nil {
		return nil, fmt.Errorf("nl: list links in %s: %w", where(k.path), err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, linkOf(l))
	}
	return out, nil
}

// linkDump dumps the namespace's links without their VFs' settings (each
// message decoded from a copy: the library's links keep slices of the
// bytes they were decoded from, and the read buffer is reused): the
// netlink library's LinkList asks for them (RTEXT_FILTER_VF), and a PF
// with a few hundred VFs then makes one message larger than the
// library's 64 KiB read, which fails every listing (EINVAL, then
// ENOBUFS). Skiff reads VFs from sysfs, never from here. Every listing
// of links goes through it.
func (k *real) linkDump() ([]netlink.Link, error) {
	var out []netlink.Link
	req := make([]byte, unix.SizeofIfInfomsg) // AF_UNSPEC, every link
	err := k.rawDo(func(c *rtnl.Conn) error {
		var err error
		for range dumpRetries {
			out = out[:0]
			err = c.Dump(unix.RTM_GETLINK, req, func(h rtnl.Header, payload []byte) error {
				if h.Type != unix.RTM_NEWLINK {
					return nil
				}
				l, err := netlink.LinkDeserialize(nil, slices.Clone(payload))
				if err != nil {
					return fmt.Errorf("decoding a link: %w", err)
				}
				out = append(out, l)
				return nil
			})
			if !errors.Is(err, rtnl.ErrDumpInterrupted) {
				break
			}
		}
		return err
	})
	return out, err
}

func (k *real) LinkByName(name string) (Link, error) {
	l, err := k.getLink(name, 0, false)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return Link{}, fmt.Errorf("nl: %s in %s: %w", name, where(k.path), ErrNoLink)
		}
		return Link{}, fmt.Errorf("nl: %s in %s: %w", name, where(k.path), err)
	}
	return linkOf(l), nil
}

// getLink asks for one link, by name or else by index, with its VFs'
// settings (not their counters) only when vfs (a PF's message then grows
// with its VFs). It
// is the library's LinkByName and LinkByIndex without their traps: they
// always ask for the VFs, and LinkByName, once one answer does not fit
// its read (EINVAL), looks every name up by dumping every link from
// then on, which fails on a PF with a few hundred VFs: a handle that
// once read such a PF could find no link after. A link that does not
// exist is an error wrapping unix.ENODEV.
// IFLA_EXT_MASK's asks (linux/rtnetlink.h): the VFs' settings
// (RTEXT_FILTER_VF), without their counters (RTEXT_FILTER_SKIP_STATS).
// The VFs' list is one attribute, at most 64 KiB: with their counters
// the kernel refuses a PF of 256 VFs (EINVAL); without, each VF takes
// about 200 bytes.
const (
	rtextFilterVF        = 1 << 0
	rtextFilterSkipStats = 1 << 3
)

func (k *real) getLink(name string, index int, vfs bool) (netlink.Link, error) {
	req := make([]byte, unix.SizeofIfInfomsg, unix.SizeofIfInfomsg+32)
	binary.NativeEndian.PutUint32(req[4:], uint32(index)) // ifi_index
	e := rtnl.NewEncoder(req)
	if name != "" {
		if len(name) < unix.IFNAMSIZ {
			e.String(unix.IFLA_IFNAME, name)
		} else {
			e.String(unix.IFLA_ALT_IFNAME, name)
		}
	}
	if vfs {
		e.U32(unix.IFLA_EXT_MASK, rtextFilterVF|rtextFilterSkipStats)
	}
	var l netlink.Link
	err := k.rawDo(func(c *rtnl.Conn) error {
		// Decoded from a copy, as linkDump does.
		return c.Get(unix.RTM_GETLINK, e.Bytes(), func(h rtnl.Header, payload []byte) error {
			if h.Type != unix.RTM_NEWLINK {
				return fmt.Errorf("answered with message type %d", h.Type)
			}
			var err error
			l, err = netlink.LinkDeserialize(nil, slices.Clone(payload))
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (k *real) AddBridge(b Bridge) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = b.Name, b.MTU
	// Without VLANFiltering the attributes stay at the kernel's defaults
	// (some kernels refuse the VLAN attribute altogether).
	br := &netlink.Bridge{LinkAttrs: la}
	if b.VLANFiltering {
		on, off, pvid := true, false, uint16(0)
		br.VlanFiltering, br.MulticastSnooping, br.VlanDefaultPVID = &on, &off, &pvid
	}
	if err := k.h.LinkAdd(br); err != nil {
		return fmt.Errorf("nl: add bridge %s: %w", b.Name, err)
	}
	return k.mark(b.Name, b.Alias)
}

func (k *real) AddVLAN(v VLAN) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.ParentIndex = v.Name, v.Parent
	if err := k.h.LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: int(v.VID)}); err != nil {
		return fmt.Errorf("nl: add vlan %s (id %d on %d): %w", v.Name, v.VID, v.Parent, k.gone(v.Parent, err))
	}
	return k.mark(v.Name, v.Alias)
}

func (k *real) AddVXLAN(v VXLAN) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = v.Name, v.MTU
	dev := &netlink.Vxlan{LinkAttrs: la, VxlanId: int(v.VNI), SrcAddr: v.Local.AsSlice(), Port: v.Port, Learning: false}
	if v.External {
		dev = &netlink.Vxlan{LinkAttrs: la, FlowBased: true, Port: v.Port, Learning: false}
	}
	if err := k.h.LinkAdd(dev); err != nil {
		return fmt.Errorf("nl: add vxlan %s (vni %d): %w", v.Name, v.VNI, err)
	}
	return k.mark(v.Name, v.Alias)
}

// mark gives a new link its alias. A link that cannot be marked is
// deleted again (a veth with its peer), so no unmarked half-made object
// is left behind.
func (k *real) mark(name, alias string) error {
	if alias == "" {
		return nil
	}
	l, err := k.getLink(name, 0, false)
	if err != nil {
		return fmt.Errorf("nl: find new link %s: %w", name, err)
	}
	k.w()
	if err := k.h.LinkSetAlias(l, alias); err != nil {
		_ = k.h.LinkDel(l)
		return fmt.Errorf("nl: mark %s: %w", name, err)
	}
	return nil
}

func (k *real) AddPair(p Pair) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = p.Name, p.MTU
	if p.MAC != "" {
		mac, err := net.ParseMAC(p.MAC)
		if err != nil {
			return fmt.Errorf("nl: veth %s mac %q: %w", p.Name, p.MAC, err)
		}
		la.HardwareAddr = mac
	}
	if err := k.h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: p.Peer}); err != nil {
		return fmt.Errorf("nl: add veth %s/%s: %w", p.Name, p.Peer, err)
	}
	if err := k.mark(p.Name, p.Alias); err != nil {
		return err
	}
	return k.mark(p.Peer, p.PeerAlias)
}

// AddVeth makes the pair in one request, its peer created straight in
// peer's namespace under its own name (no move between namespaces, which
// costs the kernel an RCU grace period).
func (k *real) AddVeth(v Veth, peer Kernel) error {
	p, ok := peer.(*real)
	if !ok {
		return fmt.Errorf("nl: add veth %s: the peer's namespace is not a kernel of nl.Open (%T)", v.Name, peer)
	}
	fd, done, err := p.nsFd()
	if err != nil {
		return err
	}
	defer done()
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = v.Name, v.MTU
	veth := &netlink.Veth{LinkAttrs: la, PeerName: v.PeerName, PeerNamespace: netlink.NsFd(int(fd))}
	if v.MTU > 0 {
		veth.PeerMTU = uint32(v.MTU)
	}
	if err := k.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("nl: add veth %s (peer %s in %s): %w", v.Name, v.PeerName, where(p.path), err)
	}
	return k.mark(v.Name, v.Alias)
}

func (k *real) AddTap(t Tap) error {
	k.w()
	tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: t.Name, MTU: t.MTU}, Mode: netlink.TUNTAP_MODE_TAP,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR, Owner: t.Owner, Group: t.Group}
	// A tap is created by /dev/net/tun in the namespace of the thread
	// that opens it.
	if err := InNetNS(k.path, func() error { return k.h.LinkAdd(tap) }); err != nil {
		return fmt.Errorf("nl: add tap %s: %w", t.Name, err)
	}
	return k.mark(t.Name, t.Alias)
}

func (k *real) byIndex(i int) (netlink.Link, error) {
	l, err := k.getLink("", i, false)
	if err != nil {
		return nil, fmt.Errorf("nl: link %d: %w", i, k.gone(i, err))
	}
	return l, nil
}

// gone marks err with ErrLinkGone when the link of index is gone.
func (k *real) gone(index int, err error) error {
	if err == nil || errors.Is(err, ErrLinkGone) {
		return err
	}
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("%w: %w", ErrLinkGone, err)
	}
	if _, lerr := k.getLink("", index, false); errors.Is(lerr, unix.ENODEV) {
		return fmt.Errorf("%w: %w", ErrLinkGone, err)
	}
	return err
}

// set runs f on the link of index, marking its error.
func (k *real) set(index int, what string, f func(l netlink.Link) error) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, f(l)); err != nil {
		return fmt.Errorf("nl: %s %s: %w", what, l.Attrs().Name, err)
	}
	return nil
}

func (k *real) DeleteLink(index int) error {
	err := k.set(index, "delete", k.h.LinkDel)
	if errors.Is(err, ErrLinkGone) {
		// Removing what is not there succeeds: a veth whose peer's
		// namespace was deleted goes with it, asynchronously.
		return nil
	}
	return err
}

func (k *real) SetMaster(index, master int) error {
	return k.set(index, fmt.Sprintf("set master %d of", master), func(l netlink.Link) error {
		if master == 0 {
			return k.h.LinkSetNoMaster(l)
		}
		return k.h.LinkSetMasterByIndex(l, master)
	})
}

func (k *real) SetUp(index int) error { return k.set(index, "set up", k.h.LinkSetUp) }

func (k *real) SetDown(index int) error { return k.set(index, "set down", k.h.LinkSetDown) }

func (k *real) SetMTU(index, mtu int) error {
	return k.set(index, fmt.Sprintf("set mtu %d of", mtu), func(l netlink.Link) error { return k.h.LinkSetMTU(l, mtu) })
}

func (k *real) SetAlias(index int, alias string) error {
	return k.set(index, "set alias of", func(l netlink.Link) error { return k.h.LinkSetAlias(l, alias) })
}

func (k *real) SetMAC(index int, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("nl: mac %q: %w", mac, err)
	}
	return k.set(index, "set mac of", func(l netlink.Link) error { return k.h.LinkSetHardwareAddr(l, hw) })
}

func (k *real) Rename(index int, name string) error {
	return k.set(index, "rename to "+name+":", func(l netlink.Link) error {
		if l.Attrs().Flags&net.FlagUp != 0 {
			if err := k.h.LinkSetDown(l); err != nil {
				return err
			}
		}
		return k.h.LinkSetName(l, name)
	})
}

func (k *real) MoveLink(index int, to Kernel) error {
	t, ok := to.(*real)
	if !ok {
		return fmt.Errorf("nl: move link %d: the target namespace is not a kernel of nl.Open (%T)", index, to)
	}
	fd, done, err := t.nsFd()
	if err != nil {
		return err
	}
	defer done()
	return k.set(index, "move to "+where(t.path)+":", func(l netlink.Link) error { return k.h.LinkSetNsFd(l, int(fd)) })
}

func (k *real) PortFlags(index int) (PortFlags, error) {
	p, err := k.protinfo(index)
	return PortFlags{Learning: p.Learning, NeighSuppress: p.NeighSuppress, Hairpin: p.Hairpin}, err
}

func (k *real) SetPortFlags(index int, f PortFlags) error {
	return k.setFlags(index, []portFlag{{"learning", k.h.LinkSetLearning, f.Learning},
		{"neigh_suppress", k.h.LinkSetBrNeighSuppress, f.NeighSuppress}, {"hairpin", k.h.LinkSetHairpin, f.Hairpin}})
}

// protinfo reads a bridge port's flags.
func (k *real) protinfo(index int) (netlink.Protinfo, error) {
	l, err := k.byIndex(index)
	if err != nil {
		return netlink.Protinfo{}, err
	}
	p, err := k.h.LinkGetProtinfo(l)
	if err = k.gone(index, err); err != nil {
		return netlink.Protinfo{}, fmt.Errorf("nl: port flags of %s: %w", l.Attrs().Name, err)
	}
	return p, nil
}

// portFlag is one bridge port flag to set: its name, the library's
// setter and the value.
type portFlag struct {
	what string
	set  func(netlink.Link, bool) error
	on   bool
}

// setFlags sets a bridge port's flags, a write each.
func (k *real) setFlags(index int, fs []portFlag) error {
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	for _, x := range fs {
		k.w()
		if err := k.gone(index, x.set(l, x.on)); err != nil {
			return fmt.Errorf("nl: set %s on %s: %w", x.what, l.Attrs().Name, err)
		}
	}
	return nil
}

func (k *real) Stats() (map[string]Counters, error) {
	ls, err := k.linkDump()
	if err != nil {
		return nil, fmt.Errorf("nl: list links in %s: %w", where(k.path), err)
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
