package nl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// FDB entries go through the handle's raw socket: the netlink library
// neither encodes nor decodes NDA_SRC_VNI, the VNI whose table of an
// external VXLAN device holds an entry.

// ndmsg is struct ndmsg: family, padding, ifindex, state, flags, type.
func ndmsg(family uint8, index int, state uint16, flags uint8) []byte {
	b := make([]byte, 12)
	b[0] = family
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint16(b[8:], state)
	b[10] = flags
	return b
}

func (k *real) FDB(index int) ([]FDB, error) { return k.fdbDump(index) }

func (k *real) FDBs() ([]FDB, error) { return k.fdbDump(0) }

// fdbDump lists the entries of link index (every link's: 0).
func (k *real) fdbDump(index int) ([]FDB, error) {
	var out []FDB
	err := k.rawDo(func(c *rtnl.Conn) error {
		for range dumpRetries {
			out = out[:0]
			err := c.Dump(unix.RTM_GETNEIGH, ndmsg(unix.AF_BRIDGE, 0, 0, 0), func(_ rtnl.Header, p []byte) error {
				if e, ok := decodeFDB(p); ok && (index == 0 || e.LinkIndex == index) {
					out = append(out, e)
				}
				return nil
			})
			if !errors.Is(err, rtnl.ErrDumpInterrupted) {
				return err
			}
		}
		return rtnl.ErrDumpInterrupted
	})
	if err != nil {
		return nil, fmt.Errorf("nl: fdb of %d: %w", index, err)
	}
	return out, nil
}

// decodeFDB reads one RTM_NEWNEIGH message of an AF_BRIDGE dump.
func decodeFDB(p []byte) (FDB, bool) {
	if len(p) < 12 || p[0] != unix.AF_BRIDGE {
		return FDB{}, false
	}
	state, flags := binary.NativeEndian.Uint16(p[8:]), p[10]
	e := FDB{LinkIndex: int(int32(binary.NativeEndian.Uint32(p[4:]))), Self: flags&unix.NTF_SELF != 0,
		Static: state&unix.NUD_NOARP != 0, Permanent: state&unix.NUD_PERMANENT != 0}
	e.Master = !e.Self
	d := rtnl.NewDecoder(p[12:])
	for d.Next() {
		switch d.Type() {
		case unix.NDA_LLADDR:
			e.MAC = net.HardwareAddr(d.Bytes()).String()
		case unix.NDA_DST:
			if ip, ok := netip.AddrFromSlice(d.Bytes()); ok {
				e.Dst = ip.Unmap()
			}
		case unix.NDA_VNI:
			e.VNI = d.U32()
		case unix.NDA_SRC_VNI:
			e.SrcVNI = d.U32()
		case unix.NDA_VLAN:
			e.VLAN = d.U16()
		}
	}
	return e, d.Err() == nil
}

// fdbMsg is the RTM_NEWNEIGH or RTM_DELNEIGH body of e.
func fdbMsg(e FDB) ([]byte, error) {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return nil, fmt.Errorf("nl: fdb mac %q: %w", e.MAC, err)
	}
	var state uint16
	if e.Static {
		state |= unix.NUD_NOARP
	}
	if e.Permanent {
		state |= unix.NUD_PERMANENT
	}
	var flags uint8
	if e.Self {
		flags |= unix.NTF_SELF
	}
	if e.Master {
		flags |= unix.NTF_MASTER
	}
	enc := rtnl.NewEncoder(ndmsg(unix.AF_BRIDGE, e.LinkIndex, state, flags))
	enc.Put(unix.NDA_LLADDR, mac)
	// Always a destination, empty without one (as the netlink library
	// sends): a VXLAN device refuses an empty one (EAFNOSUPPORT) rather
	// than take its default remote, and a bridge ignores it.
	enc.Put(unix.NDA_DST, e.Dst.AsSlice())
	if e.VNI != 0 {
		enc.U32(unix.NDA_VNI, e.VNI)
	}
	if e.SrcVNI != 0 {
		enc.U32(unix.NDA_SRC_VNI, e.SrcVNI)
	}
	if e.VLAN != 0 {
		enc.U16(unix.NDA_VLAN, e.VLAN)
	}
	return enc.Bytes(), nil
}

// fdbDo sends one FDB request for each of es, pipelined; what ignore
// matches is no error.
func (k *real) fdbDo(what string, typ, flags uint16, es []FDB, ignore unix.Errno) error {
	reqs := make([]rtnl.Request, 0, len(es))
	for _, e := range es {
		k.w()
		b, err := fdbMsg(e)
		if err != nil {
			return err
		}
		reqs = append(reqs, rtnl.Request{Type: typ, Flags: flags, Data: b})
	}
	return k.pipelined(what+" fdb", reqs, ignore, func(i int, err error) error {
		e := es[i]
		return fmt.Errorf("nl: %s fdb %s dst %v vni %d on %d: %w", what, e.MAC, e.Dst, e.SrcVNI, e.LinkIndex, k.gone(e.LinkIndex, err))
	})
}

// pipelined sends reqs over the handle's route socket, pipelined, and
// joins the refusals (those matching ignore are none), each described
// by describe with the request's position.
func (k *real) pipelined(what string, reqs []rtnl.Request, ignore unix.Errno, describe func(i int, err error) error) error {
	var answers []error
	if err := k.rawDo(func(c *rtnl.Conn) error {
		var err error
		answers, err = c.Do(reqs)
		return err
	}); err != nil {
		return fmt.Errorf("nl: %s: %w", what, err)
	}
	var errs []error
	for i, err := range answers {
		if err != nil && !errors.Is(err, ignore) {
			errs = append(errs, describe(i, err))
		}
	}
	return errors.Join(errs...)
}

// AddFDB appends: several all-zero entries (one per remote VTEP) may
// coexist.
func (k *real) AddFDB(e FDB) error { return k.AddFDBs([]FDB{e}) }

func (k *real) AddFDBs(es []FDB) error {
	return k.fdbDo("add", unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_APPEND, es, unix.EEXIST)
}

func (k *real) SetFDB(e FDB) error {
	return k.fdbDo("set", unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, []FDB{e}, 0)
}

func (k *real) DeleteFDB(e FDB) error { return k.DeleteFDBs([]FDB{e}) }

func (k *real) DeleteFDBs(es []FDB) error {
	return k.fdbDo("delete", unix.RTM_DELNEIGH, 0, es, unix.ENOENT)
}
