package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Options choose the namespace.
type Options struct {
	// NetNS is a path such as /var/run/netns/NAME; empty means the
	// namespace of the calling process.
	NetNS string
}

type real struct {
	h      *netlink.Handle
	writes atomic.Int64
}

// Open returns the real kernel of a namespace.
func Open(o Options) (Kernel, error) {
	var h *netlink.Handle
	var err error
	// Route and netfilter only: the default set adds NETLINK_XFRM, whose
	// socket fails (EPROTONOSUPPORT) where xfrm_user is not loaded, and
	// Skiff never uses it.
	families := []int{unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER}
	if o.NetNS == "" {
		h, err = netlink.NewHandle(families...)
	} else {
		ns, nerr := netns.GetFromPath(o.NetNS)
		if nerr != nil {
			return nil, fmt.Errorf("nl: namespace %s: %w", o.NetNS, nerr)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns, families...)
	}
	if err != nil {
		return nil, fmt.Errorf("nl: netlink handle: %w", err)
	}
	return &real{h: h}, nil
}

func (k *real) Writes() int { return int(k.writes.Load()) }

// dumpRetries bounds how often a dump the kernel interrupted (because the
// table changed while it was read) is started over.
const dumpRetries = 20

// dump runs f again while the kernel reports an interrupted dump, whose
// results may be incomplete.
func dump[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range dumpRetries {
		if v, err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

func (k *real) w() { k.writes.Add(1) }

func (k *real) Links() ([]Link, error) {
	ls, err := dump(k.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("nl: list links: %w", err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
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
			if ip, ok := netip.AddrFromSlice(v.SrcAddr); ok {
				x.Local = ip.Unmap()
			}
		}
		out = append(out, x)
	}
	return out, nil
}

func (k *real) AddBridge(b Bridge) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = b.Name, b.MTU
	// VLAN filtering stays at the kernel's default (off); some kernels
	// refuse the attribute altogether.
	if err := k.h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		return fmt.Errorf("nl: add bridge %s: %w", b.Name, err)
	}
	return k.finish(b.Name, b.Alias)
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
	return k.finish(v.Name, v.Alias)
}

// finish marks a new link with its alias. A link that cannot be marked is
// deleted again, so no unmarked half-made object is left behind.
func (k *real) finish(name, alias string) error {
	l, err := k.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("nl: find new link %s: %w", name, err)
	}
	if err := k.h.LinkSetAlias(l, alias); err != nil {
		_ = k.h.LinkDel(l)
		return fmt.Errorf("nl: mark %s: %w", name, err)
	}
	return nil
}

// ErrLinkGone is wrapped by the error of a call on a link that no longer
// exists: deleted between a listing and the call (by an endpoint's
// unplumb, or with its namespace). The caller's next listing no longer
// holds it; it is not a failure of the caller.
var ErrLinkGone = errors.New("the link is gone")

func (k *real) byIndex(i int) (netlink.Link, error) {
	l, err := k.h.LinkByIndex(i)
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
	if _, lerr := k.h.LinkByIndex(index); errors.As(lerr, &nf) {
		return fmt.Errorf("%w: %w", ErrLinkGone, err)
	}
	return err
}

func (k *real) DeleteLink(index int) error {
	k.w()
	l, err := k.byIndex(index)
	if errors.Is(err, ErrLinkGone) {
		return nil // removing what is not there succeeds
	}
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.LinkDel(l)); err != nil && !errors.Is(err, ErrLinkGone) {
		return fmt.Errorf("nl: delete %s: %w", l.Attrs().Name, err)
	}
	return nil
}

func (k *real) SetMaster(index, master int) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.LinkSetMasterByIndex(l, master)); err != nil {
		return fmt.Errorf("nl: enslave %s to %d: %w", l.Attrs().Name, master, err)
	}
	return nil
}

func (k *real) SetUp(index int) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.LinkSetUp(l)); err != nil {
		return fmt.Errorf("nl: set %s up: %w", l.Attrs().Name, err)
	}
	return nil
}

func (k *real) SetMTU(index, mtu int) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.LinkSetMTU(l, mtu)); err != nil {
		return fmt.Errorf("nl: set %s mtu %d: %w", l.Attrs().Name, mtu, err)
	}
	return nil
}

func (k *real) SetAlias(index int, alias string) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.LinkSetAlias(l, alias)); err != nil {
		return fmt.Errorf("nl: set %s alias: %w", l.Attrs().Name, err)
	}
	return nil
}

func (k *real) PortFlags(index int) (PortFlags, error) {
	l, err := k.byIndex(index)
	if err != nil {
		return PortFlags{}, err
	}
	p, err := k.h.LinkGetProtinfo(l)
	if err = k.gone(index, err); err != nil {
		return PortFlags{}, fmt.Errorf("nl: port flags of %s: %w", l.Attrs().Name, err)
	}
	return PortFlags{Learning: p.Learning, NeighSuppress: p.NeighSuppress, Hairpin: p.Hairpin}, nil
}

func (k *real) SetPortFlags(index int, f PortFlags) error {
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	k.w()
	if err := k.gone(index, k.h.LinkSetLearning(l, f.Learning)); err != nil {
		return fmt.Errorf("nl: set learning on %s: %w", l.Attrs().Name, err)
	}
	k.w()
	if err := k.gone(index, k.h.LinkSetBrNeighSuppress(l, f.NeighSuppress)); err != nil {
		return fmt.Errorf("nl: set neigh_suppress on %s: %w", l.Attrs().Name, err)
	}
	k.w()
	if err := k.gone(index, k.h.LinkSetHairpin(l, f.Hairpin)); err != nil {
		return fmt.Errorf("nl: set hairpin on %s: %w", l.Attrs().Name, err)
	}
	return nil
}

func (k *real) FDB(index int) ([]FDB, error) {
	ns, err := dump(func() ([]netlink.Neigh, error) { return k.h.NeighList(index, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("nl: fdb of %d: %w", index, err)
	}
	var out []FDB
	for _, n := range ns {
		if n.LinkIndex != index {
			continue
		}
		e := FDB{LinkIndex: n.LinkIndex, MAC: n.HardwareAddr.String(), Self: n.Flags&netlink.NTF_SELF != 0,
			Master: n.Flags&netlink.NTF_SELF == 0, Static: n.State&netlink.NUD_NOARP != 0, Permanent: n.State&netlink.NUD_PERMANENT != 0}
		if ip, ok := netip.AddrFromSlice(n.IP); ok {
			e.Dst = ip.Unmap()
		}
		out = append(out, e)
	}
	return out, nil
}

func (k *real) fdbNeigh(e FDB) (*netlink.Neigh, error) {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return nil, fmt.Errorf("nl: fdb mac %q: %w", e.MAC, err)
	}
	n := &netlink.Neigh{LinkIndex: e.LinkIndex, Family: unix.AF_BRIDGE, HardwareAddr: mac}
	if e.Static {
		n.State |= netlink.NUD_NOARP
	}
	if e.Permanent {
		n.State |= netlink.NUD_PERMANENT
	}
	if e.Self {
		n.Flags |= netlink.NTF_SELF
	}
	if e.Master {
		n.Flags |= netlink.NTF_MASTER
	}
	if e.Dst.IsValid() {
		n.IP = e.Dst.AsSlice()
	}
	return n, nil
}

func (k *real) AddFDB(e FDB) error {
	k.w()
	n, err := k.fdbNeigh(e)
	if err != nil {
		return err
	}
	// Append: several all-zero entries (one per remote VTEP) may coexist.
	if err := k.h.NeighAppend(n); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("nl: add fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, err)
	}
	return nil
}

func (k *real) SetFDB(e FDB) error {
	k.w()
	n, err := k.fdbNeigh(e)
	if err != nil {
		return err
	}
	if err := k.h.NeighSet(n); err != nil {
		return fmt.Errorf("nl: set fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, err)
	}
	return nil
}

func (k *real) DeleteFDB(e FDB) error {
	k.w()
	n, err := k.fdbNeigh(e)
	if err != nil {
		return err
	}
	if err := k.h.NeighDel(n); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, err)
	}
	return nil
}

func (k *real) Neighs(index int) ([]Neigh, error) {
	var out []Neigh
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		ns, err := dump(func() ([]netlink.Neigh, error) { return k.h.NeighList(index, fam) })
		if err != nil {
			return nil, fmt.Errorf("nl: neighbours of %d: %w", index, err)
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok || n.LinkIndex != index {
				continue
			}
			out = append(out, Neigh{LinkIndex: n.LinkIndex, IP: ip.Unmap(), MAC: n.HardwareAddr.String(), Permanent: n.State&netlink.NUD_PERMANENT != 0})
		}
	}
	return out, nil
}

func (k *real) neigh(n Neigh) (*netlink.Neigh, error) {
	mac, err := net.ParseMAC(n.MAC)
	if err != nil && n.MAC != "" {
		return nil, fmt.Errorf("nl: neighbour mac %q: %w", n.MAC, err)
	}
	fam := unix.AF_INET6
	if n.IP.Is4() {
		fam = unix.AF_INET
	}
	return &netlink.Neigh{LinkIndex: n.LinkIndex, Family: fam, IP: n.IP.AsSlice(), HardwareAddr: mac, State: netlink.NUD_PERMANENT}, nil
}

func (k *real) SetNeigh(n Neigh) error {
	k.w()
	x, err := k.neigh(n)
	if err != nil {
		return err
	}
	if err := k.h.NeighSet(x); err != nil {
		return fmt.Errorf("nl: set neighbour %s on %d: %w", n.IP, n.LinkIndex, err)
	}
	return nil
}

func (k *real) DeleteNeigh(n Neigh) error {
	k.w()
	x, err := k.neigh(n)
	if err != nil {
		return err
	}
	if err := k.h.NeighDel(x); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete neighbour %s on %d: %w", n.IP, n.LinkIndex, err)
	}
	return nil
}

func (k *real) Addrs(index int) ([]netip.Prefix, error) {
	l, err := k.byIndex(index)
	if err != nil {
		return nil, err
	}
	as, err := dump(func() ([]netlink.Addr, error) { return k.h.AddrList(l, netlink.FAMILY_ALL) })
	if err = k.gone(index, err); err != nil {
		return nil, fmt.Errorf("nl: addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, a := range as {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Unmap().IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), bits))
	}
	return out, nil
}

func addrOf(a netip.Prefix) *netlink.Addr {
	x := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
	if a.Addr().Is6() {
		x.Flags = unix.IFA_F_NODAD
	}
	return x
}

func (k *real) AddAddr(index int, a netip.Prefix) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.gone(index, k.h.AddrReplace(l, addrOf(a))); err != nil {
		return fmt.Errorf("nl: add %s to %s: %w", a, l.Attrs().Name, err)
	}
	return nil
}

func (k *real) DeleteAddr(index int, a netip.Prefix) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	if err := k.h.AddrDel(l, addrOf(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("nl: delete %s from %s: %w", a, l.Attrs().Name, err)
	}
	return nil
}

func (k *real) SetMAC(index int, mac string) error {
	k.w()
	l, err := k.byIndex(index)
	if err != nil {
		return err
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("nl: mac %q: %w", mac, err)
	}
	if err := k.gone(index, k.h.LinkSetHardwareAddr(l, hw)); err != nil {
		return fmt.Errorf("nl: set %s mac: %w", l.Attrs().Name, err)
	}
	return nil
}
