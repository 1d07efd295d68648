package nl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// usable are the neighbour states packets can use now.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Neighs dumps each family's entries with the link in the request
// (NDA_IFINDEX), so that the kernel sends that link's alone: the netlink
// library's listing dumps every entry of the namespace and filters them
// itself, which costs every caller the namespace's whole table (a node's
// replication bridge holds one entry per address of its networks).
func (k *real) Neighs(index int) ([]Neigh, error) {
	var out []Neigh
	err := k.rawDo(func(c *rtnl.Conn) error {
		for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
			enc := rtnl.NewEncoder(ndmsg(fam, 0, 0, 0))
			enc.U32(unix.NDA_IFINDEX, uint32(index))
			req := enc.Bytes()
			n := len(out)
			err := rtnl.ErrDumpInterrupted
			for range dumpRetries {
				out = out[:n]
				err = c.Dump(unix.RTM_GETNEIGH, req, func(_ rtnl.Header, p []byte) error {
					if e, ok := decodeNeigh(p); ok && e.LinkIndex == index {
						out = append(out, e)
					}
					return nil
				})
				if !errors.Is(err, rtnl.ErrDumpInterrupted) {
					break
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("nl: neighbours of %d: %w", index, k.gone(index, err))
	}
	return out, nil
}

// decodeNeigh reads one RTM_NEWNEIGH message of an IPv4 or IPv6 dump.
func decodeNeigh(p []byte) (Neigh, bool) {
	if len(p) < 12 || (p[0] != unix.AF_INET && p[0] != unix.AF_INET6) {
		return Neigh{}, false
	}
	state := binary.NativeEndian.Uint16(p[8:])
	e := Neigh{LinkIndex: int(int32(binary.NativeEndian.Uint32(p[4:]))), Permanent: state&unix.NUD_PERMANENT != 0, Usable: state&usable != 0}
	d := rtnl.NewDecoder(p[12:])
	for d.Next() {
		switch d.Type() {
		case unix.NDA_DST:
			if ip, ok := netip.AddrFromSlice(d.Bytes()); ok {
				e.IP = ip.Unmap()
			}
		case unix.NDA_LLADDR:
			e.MAC = net.HardwareAddr(d.Bytes()).String()
		}
	}
	return e, d.Err() == nil && e.IP.IsValid()
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

// neighMsg is the RTM_NEWNEIGH or RTM_DELNEIGH body of permanent entry n
// (no link-layer address when n has none: a delete).
func neighMsg(n Neigh) ([]byte, error) {
	fam := uint8(unix.AF_INET6)
	if n.IP.Is4() {
		fam = unix.AF_INET
	}
	enc := rtnl.NewEncoder(ndmsg(fam, n.LinkIndex, unix.NUD_PERMANENT, 0))
	enc.Put(unix.NDA_DST, n.IP.AsSlice())
	if n.MAC != "" {
		mac, err := net.ParseMAC(n.MAC)
		if err != nil {
			return nil, fmt.Errorf("nl: neighbour mac %q: %w", n.MAC, err)
		}
		enc.Put(unix.NDA_LLADDR, mac)
	}
	return enc.Bytes(), nil
}

// neighsDo sends one neighbour request for each of ns, pipelined; what
// ignore matches is no error.
func (k *real) neighsDo(what string, typ, flags uint16, ns []Neigh, ignore unix.Errno) error {
	if len(ns) == 0 {
		return nil
	}
	reqs := make([]rtnl.Request, 0, len(ns))
	for _, n := range ns {
		k.w()
		if !n.IP.IsValid() {
			return fmt.Errorf("nl: %s neighbour on %d: no address", what, n.LinkIndex)
		}
		b, err := neighMsg(n)
		if err != nil {
			return err
		}
		reqs = append(reqs, rtnl.Request{Type: typ, Flags: flags, Data: b})
	}
	return k.pipelined(what+" neighbours", reqs, ignore, func(i int, err error) error {
		return fmt.Errorf("nl: %s neighbour %s on %d: %w", what, ns[i].IP, ns[i].LinkIndex, k.gone(ns[i].LinkIndex, err))
	})
}

func (k *real) SetNeighs(ns []Neigh) error {
	return k.neighsDo("set", unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, ns, 0)
}

func (k *real) DeleteNeighs(ns []Neigh) error {
	return k.neighsDo("delete", unix.RTM_DELNEIGH, 0, ns, unix.ENOENT)
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
