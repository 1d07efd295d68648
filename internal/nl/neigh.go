package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// usable are the neighbour states packets can use now.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

func (k *real) Neighs(index int) ([]Neigh, error) {
	var out []Neigh
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		ns, err := dump(func() ([]netlink.Neigh, error) { return k.h.NeighList(index, fam) })
		if err != nil {
			return nil, fmt.Errorf("nl: neighbours of %d: %w", index, k.gone(index, err))
		}
		for _, n := range ns {
			ip, ok := addrFrom(n.IP)
			if !ok || n.LinkIndex != index {
				continue
			}
			out = append(out, Neigh{LinkIndex: n.LinkIndex, IP: ip, MAC: n.HardwareAddr.String(),
				Permanent: n.State&netlink.NUD_PERMANENT != 0, Usable: n.State&usable != 0})
		}
	}
	return out, nil
}

func neighOf(n Neigh) (*netlink.Neigh, error) {
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
	x, err := neighOf(n)
	if err != nil {
		return err
	}
	if err := k.h.NeighSet(x); err != nil {
		return fmt.Errorf("nl: set neighbour %s on %d: %w", n.IP, n.LinkIndex, k.gone(n.LinkIndex, err))
	}
	return nil
}

func (k *real) DeleteNeigh(n Neigh) error {
	k.w()
	x, err := neighOf(n)
	if err != nil {
		return err
	}
	if err := k.h.NeighDel(x); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete neighbour %s on %d: %w", n.IP, n.LinkIndex, k.gone(n.LinkIndex, err))
	}
	return nil
}

func (k *real) Resolve(index int, ip netip.Addr) error {
	fam := unix.AF_INET6
	if ip.Is4() {
		fam = unix.AF_INET
	}
	err := k.h.NeighSet(&netlink.Neigh{LinkIndex: index, Family: fam, IP: ip.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		return fmt.Errorf("nl: resolving %s on %d: %w", ip, index, k.gone(index, err))
	}
	return nil
}

func (k *real) FDB(index int) ([]FDB, error) {
	ns, err := dump(func() ([]netlink.Neigh, error) { return k.h.NeighList(index, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("nl: fdb of %d: %w", index, k.gone(index, err))
	}
	var out []FDB
	for _, n := range ns {
		if n.LinkIndex != index {
			continue
		}
		e := FDB{LinkIndex: n.LinkIndex, MAC: n.HardwareAddr.String(), Self: n.Flags&netlink.NTF_SELF != 0,
			Master: n.Flags&netlink.NTF_SELF == 0, Static: n.State&netlink.NUD_NOARP != 0, Permanent: n.State&netlink.NUD_PERMANENT != 0}
		if ip, ok := addrFrom(n.IP); ok {
			e.Dst = ip
		}
		out = append(out, e)
	}
	return out, nil
}

func fdbOf(e FDB) (*netlink.Neigh, error) {
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
	n, err := fdbOf(e)
	if err != nil {
		return err
	}
	// Append: several all-zero entries (one per remote VTEP) may coexist.
	if err := k.h.NeighAppend(n); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("nl: add fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, k.gone(e.LinkIndex, err))
	}
	return nil
}

func (k *real) SetFDB(e FDB) error {
	k.w()
	n, err := fdbOf(e)
	if err != nil {
		return err
	}
	if err := k.h.NeighSet(n); err != nil {
		return fmt.Errorf("nl: set fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, k.gone(e.LinkIndex, err))
	}
	return nil
}

func (k *real) DeleteFDB(e FDB) error {
	k.w()
	n, err := fdbOf(e)
	if err != nil {
		return err
	}
	if err := k.h.NeighDel(n); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete fdb %s dst %v on %d: %w", e.MAC, e.Dst, e.LinkIndex, k.gone(e.LinkIndex, err))
	}
	return nil
}
