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
