package nltest

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// Neighbours and forwarding entries, as the real handle's neigh.go reads
// and writes them. A listing of a link that is gone is empty, as the
// kernel's dump filtered by that index is.

// parseMAC is a MAC as the real handle parses it ("" for none).
func parseMAC(what, mac string) (string, error) {
	if mac == "" {
		return "", nil
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "", fmt.Errorf("nl: %s mac %q: %w", what, mac, err)
	}
	if len(hw) != 6 {
		return "", fmt.Errorf("nl: %s mac %q: %w", what, mac, unix.EINVAL)
	}
	return hw.String(), nil
}

func (k *kernel) Neighs(index int) ([]nl.Neigh, error) {
	var out []nl.Neigh
	err := k.do(func(n *NS) error {
		l := n.links[index]
		if l == nil {
			return nil
		}
		for ip, e := range l.neighs {
			out = append(out, nl.Neigh{LinkIndex: index, IP: ip, MAC: e.mac, Permanent: e.state == nudPermanent, Usable: e.state != nudIncomplete})
		}
		slices.SortFunc(out, func(a, b nl.Neigh) int {
			return cmp.Or(cmp.Compare(a.IP.BitLen(), b.IP.BitLen()), a.IP.Compare(b.IP))
		})
		return nil
	})
	return out, err
}

// neighLink is the link of a neighbour call: gone is ErrLinkGone.
func neighLink(n *NS, what string, ip netip.Addr, index int) (*link, error) {
	l := n.links[index]
	if l == nil {
		return nil, fmt.Errorf("nl: %s %s on %d: %w: %w", what, ip, index, nl.ErrLinkGone, unix.ENODEV)
	}
	return l, nil
}

func (k *kernel) SetNeigh(e nl.Neigh) error {
	k.write()
	mac, err := parseMAC("neighbour", e.MAC)
	if err != nil {
		return err
	}
	return k.do(func(n *NS) error {
		l, err := neighLink(n, "set neighbour", e.IP, e.LinkIndex)
		if err != nil {
			return err
		}
		if !e.IP.IsValid() {
			return fmt.Errorf("nl: set neighbour %s on %d: %w", e.IP, e.LinkIndex, unix.EINVAL)
		}
		ip := e.IP.Unmap()
		if h := l.neighs[ip]; h == nil || h.mac != mac || h.state != nudPermanent {
			l.neighs[ip] = &neigh{mac: mac, state: nudPermanent}
			n.event(nl.Event{Kind: "neigh", Index: l.Index, Static: true})
		}
		return nil
	})
}

func (k *kernel) DeleteNeigh(e nl.Neigh) error {
	k.write()
	if _, err := parseMAC("neighbour", e.MAC); err != nil {
		return err
	}
	return k.do(func(n *NS) error {
		l, err := neighLink(n, "delete neighbour", e.IP, e.LinkIndex)
		if err != nil {
			return err
		}
		if h := l.neighs[e.IP.Unmap()]; h != nil {
			delete(l.neighs, e.IP.Unmap())
			n.event(nl.Event{Kind: "neigh", Index: l.Index, Deleted: true, Static: h.state == nudPermanent})
		}
		return nil
	})
}

// Resolve leaves an incomplete entry (not usable) and counts a probe
// unless the entry is usable; NS.NeighReply makes it usable. The real
// handle asks with family AF_INET whatever the address: the kernel
// takes the first 4 bytes of an IPv6 address as an IPv4 one (an entry
// for 2001:db8::1 is one for 32.1.13.184), and so does the fake.
func (k *kernel) Resolve(index int, ip netip.Addr) error {
	return k.do(func(n *NS) error {
		l, err := neighLink(n, "resolving", ip, index)
		if err != nil {
			return fmt.Errorf("nl: resolving %s on %d: %w", ip, index, err)
		}
		ip = ip.Unmap()
		if h := l.neighs[ip]; h != nil && h.state != nudIncomplete {
			return nil
		}
		if l.neighs[ip] == nil {
			l.neighs[ip] = &neigh{state: nudIncomplete}
		}
		n.probes[probeKey{index, ip}]++
		return nil
	})
}

func (k *kernel) SetNeighs(ns []nl.Neigh) error {
	var errs []error
	for _, n := range ns {
		errs = append(errs, k.SetNeigh(n))
	}
	return errors.Join(errs...)
}

func (k *kernel) DeleteNeighs(ns []nl.Neigh) error {
	var errs []error
	for _, n := range ns {
		errs = append(errs, k.DeleteNeigh(n))
	}
	return errors.Join(errs...)
}

func zeroOrMulticast(mac string) bool {
	hw, _ := net.ParseMAC(mac)
	return hw[0]&1 != 0 || mac == "00:00:00:00:00:00"
}

func (k *kernel) FDB(index int) ([]nl.FDB, error) {
	var out []nl.FDB
	err := k.do(func(n *NS) error {
		if l := n.links[index]; l != nil {
			out = n.fdbOf(l)
		}
		return nil
	})
	return out, err
}

func (k *kernel) FDBs() ([]nl.FDB, error) {
	var out []nl.FDB
	err := k.do(func(n *NS) error {
		for _, l := range n.sorted() {
			out = append(out, n.fdbOf(l)...)
		}
		return nil
	})
	return out, err
}

// fdbOf lists l's entries: the bridge's for it (by MAC, then VLAN),
// then its own.
func (n *NS) fdbOf(l *link) []nl.FDB {
	var out []nl.FDB
	br := n.links[l.Master]
	if l.Kind == "bridge" {
		br = l // its own entries
	}
	if br != nil {
		for k, e := range br.fdb {
			if e.port == l {
				out = append(out, nl.FDB{LinkIndex: l.Index, MAC: k.mac, VLAN: k.vlan, Master: true, Static: e.static && !e.permanent, Permanent: e.permanent})
			}
		}
		slices.SortFunc(out, func(a, b nl.FDB) int { return cmp.Or(cmp.Compare(a.MAC, b.MAC), cmp.Compare(a.VLAN, b.VLAN)) })
	}
	for _, e := range l.self {
		for i, d := range e.dsts {
			out = append(out, nl.FDB{LinkIndex: l.Index, MAC: e.mac, Dst: d, Self: true, Static: e.static, Permanent: true,
				SrcVNI: e.srcVNI, VNI: e.vnis[i]})
		}
	}
	return out
}

// fdbOp is what an FDB call asks: add (append), set (replace) or delete.
type fdbOp int

const (
	fdbAdd fdbOp = iota
	fdbSet
	fdbDelete
)

func (k *kernel) AddFDB(e nl.FDB) error    { return k.fdb(e, fdbAdd, "add") }
func (k *kernel) SetFDB(e nl.FDB) error    { return k.fdb(e, fdbSet, "set") }
func (k *kernel) DeleteFDB(e nl.FDB) error { return k.fdb(e, fdbDelete, "delete") }

func (k *kernel) AddFDBs(es []nl.FDB) error    { return k.fdbs(es, k.AddFDB) }
func (k *kernel) DeleteFDBs(es []nl.FDB) error { return k.fdbs(es, k.DeleteFDB) }

// fdbs runs one of es at a time through op, every one whatever the
// others' errors, and joins the errors.
func (k *kernel) fdbs(es []nl.FDB, op func(nl.FDB) error) error {
	var errs []error
	for _, e := range es {
		errs = append(errs, op(e))
	}
	return errors.Join(errs...)
}

// fdb carries out an FDB call: the bridge's entry when Master is set (or
// neither flag), then the device's own when Self is, as the kernel
// does; a VXLAN device's own entries need NUD_PERMANENT; what is not
// there to delete is no error.
func (k *kernel) fdb(e nl.FDB, op fdbOp, what string) error {
	k.write()
	mac, err := parseMAC("fdb", e.MAC)
	if err != nil {
		return err
	}
	if mac == "" {
		return fmt.Errorf("nl: fdb mac %q: %w", e.MAC, unix.EINVAL)
	}
	return k.do(func(n *NS) error {
		fail := func(err error) error {
			return fmt.Errorf("nl: %s fdb %s dst %v on %d: %w", what, e.MAC, e.Dst, e.LinkIndex, err)
		}
		l := n.links[e.LinkIndex]
		if l == nil {
			return fail(fmt.Errorf("%w: %w", nl.ErrLinkGone, unix.ENODEV))
		}
		if !e.Self && !e.Master || e.Master {
			br := n.links[l.Master]
			if br == nil {
				return fail(unix.EOPNOTSUPP)
			}
			if br.vlanOn && e.VLAN != 0 && !slices.ContainsFunc(l.vlans, func(v nl.BridgeVLAN) bool { return v.VID == e.VLAN }) {
				// "RTM_NEWNEIGH/RTM_DELNEIGH with unconfigured vlan": a
				// static entry outlives its VLAN on the port and can no
				// longer be deleted by it.
				return fail(unix.EINVAL)
			}
			n.bridgeFDB(br, l, mac, e, op)
		}
		if !e.Self {
			return nil
		}
		var err error
		switch l.Kind {
		case "vxlan":
			err = n.selfFDB(l, mac, e, op)
		case "bridge":
			// The bridge's own table, for the bridge itself: local
			// entries only.
			if op != fdbDelete && !e.Permanent {
				err = unix.EINVAL
			} else {
				n.bridgeFDB(l, l, mac, e, op)
			}
		default:
			err = n.addressFDB(l, mac, e, op)
		}
		if err != nil {
			return fail(err)
		}
		return nil
	})
}

// addressFDB is the kernel's default for the own entries of a device
// that keeps no table: its unicast address list, listed as permanent
// entries without a destination.
func (n *NS) addressFDB(l *link, mac string, e nl.FDB, op fdbOp) error {
	i := slices.IndexFunc(l.self, func(s selfFDB) bool { return s.mac == mac })
	switch {
	case op == fdbDelete:
		if i >= 0 {
			l.self = slices.Delete(l.self, i, i+1)
			n.event(nl.Event{Kind: "neigh", Index: l.Index, Deleted: true, Static: true})
		}
		return nil
	case e.Static && !e.Permanent:
		return unix.EINVAL
	case i >= 0:
		return unix.EEXIST
	}
	l.self = append(l.self, selfFDB{mac: mac, dsts: []netip.Addr{{}}, vnis: []uint32{0}})
	n.event(nl.Event{Kind: "neigh", Index: l.Index, Static: true})
	return nil
}

func (n *NS) bridgeFDB(br, port *link, mac string, e nl.FDB, op fdbOp) {
	key := fdbKey{mac: mac, vlan: e.VLAN}
	h := br.fdb[key]
	if op == fdbDelete {
		if h != nil && h.port == port {
			delete(br.fdb, key)
			n.event(nl.Event{Kind: "neigh", Index: port.Index, Deleted: true, Static: h.permanent || h.static})
		}
		return
	}
	x := &brFDB{port: port, permanent: e.Permanent, static: e.Static || e.Permanent}
	if h == nil || *h != *x {
		br.fdb[key] = x
		n.event(nl.Event{Kind: "neigh", Index: port.Index, Static: x.static})
	}
}

// selfFDB is a VXLAN device's own table. Without a destination the
// kernel takes the family of the device's default remote, which a
// device made by AddVXLAN has none of (EAFNOSUPPORT).
func (n *NS) selfFDB(l *link, mac string, e nl.FDB, op fdbOp) error {
	dst := e.Dst.Unmap()
	if !dst.IsValid() {
		return unix.EAFNOSUPPORT
	}
	// An external device keeps a table per source VNI; another device
	// has its own VNI only.
	src := e.SrcVNI
	if !l.External {
		src = 0
	}
	i := slices.IndexFunc(l.self, func(s selfFDB) bool { return s.mac == mac && s.srcVNI == src })
	if op == fdbDelete {
		if i < 0 {
			return nil
		}
		if dst.IsUnspecified() {
			l.self = slices.Delete(l.self, i, i+1)
		} else if j := slices.Index(l.self[i].dsts, dst); j >= 0 {
			l.self[i].dsts = slices.Delete(l.self[i].dsts, j, j+1)
			l.self[i].vnis = slices.Delete(l.self[i].vnis, j, j+1)
			if len(l.self[i].dsts) == 0 {
				l.self = slices.Delete(l.self, i, i+1)
			}
		} else {
			return nil
		}
		n.event(nl.Event{Kind: "neigh", Index: l.Index, Deleted: true, Static: true})
		return nil
	}
	if !e.Permanent {
		return unix.EINVAL
	}
	many := zeroOrMulticast(mac)
	if op == fdbSet && many {
		return unix.EOPNOTSUPP // the kernel replaces only unicast entries
	}
	switch {
	case i < 0:
		l.self = append(l.self, selfFDB{mac: mac, srcVNI: src, dsts: []netip.Addr{dst}, vnis: []uint32{e.VNI}, static: e.Static})
	case op == fdbSet:
		l.self[i].dsts[0], l.self[i].vnis[0], l.self[i].static = dst, e.VNI, e.Static
	case many && !slices.Contains(l.self[i].dsts, dst):
		l.self[i].dsts = append(l.self[i].dsts, dst)
		l.self[i].vnis = append(l.self[i].vnis, e.VNI)
	default:
		l.self[i].static = e.Static
		return nil
	}
	n.event(nl.Event{Kind: "neigh", Index: l.Index, Static: true})
	return nil
}
