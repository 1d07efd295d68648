package tc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Conn installs and dumps filters over rtnetlink sockets: one for
// everything, and more for WriteAny's bulk writes (DialWriters). It is
// not safe for concurrent use.
type Conn struct {
	c  *rtnl.Conn
	cs []*rtnl.Conn // c first, then the other writers
}

// Dial opens a connection in the network namespace at path (empty: the
// caller's).
func Dial(netns string) (*Conn, error) { return DialWriters(netns, 1) }

// DialWriters opens a connection in the network namespace at path (empty:
// the caller's) with n sockets (at least 1): WriteAny splits bulk writes
// across them, which the kernel carries out in parallel (flower does
// not take the rtnl lock).
func DialWriters(netns string, n int) (*Conn, error) {
	c := &Conn{}
	for range max(n, 1) {
		s, err := rtnl.Dial(netns)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("tc: %w", err)
		}
		c.cs = append(c.cs, s)
	}
	c.c = c.cs[0]
	return c, nil
}

// Close releases the sockets.
func (c *Conn) Close() error {
	var errs []error
	for _, s := range c.cs {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// PortIDs are the sockets' netlink port ids: notifications of the changes
// they make carry them.
func (c *Conn) PortIDs() []uint32 {
	ids := make([]uint32, len(c.cs))
	for i, s := range c.cs {
		ids[i] = s.PortID()
	}
	return ids
}

// Messages is the number of netlink messages sent and received so far.
func (c *Conn) Messages() int64 {
	var n int64
	for _, s := range c.cs {
		n += s.Sent() + s.Received()
	}
	return n
}

// OpKind says what an Op does.
type OpKind int

// Operations on filters.
const (
	// Add creates the filter (NLM_F_CREATE|NLM_F_EXCL): a filter with the
	// same handle, or with the same key at the same chain, priority and
	// protocol, is an error (EEXIST).
	Add OpKind = iota
	// Replace changes the filter at Handle (which must exist: ENOENT).
	Replace
	// Delete removes the filter at Handle.
	Delete
)

// Op is one change of a filter.
type Op struct {
	Kind   OpKind
	Filter *Filter
}

// Write carries out ops in order, many per sendmsg, and returns one entry
// per op: nil, or the kernel's refusal (an *rtnl.Error: errors.Is works
// with unix.E*). err is a failure of the socket.
func (c *Conn) Write(ops []Op) ([]error, error) {
	if err := checkOps(ops); err != nil {
		return nil, err
	}
	reqs := make([]rtnl.Request, len(ops))
	for i, op := range ops {
		reqs[i] = request(op)
	}
	return c.c.Do(reqs)
}

// WriteAny carries out ops, which must be independent of each other (no
// op needs another done first), as Write does but in no promised order:
// bulk writes are split across the connection's sockets (DialWriters) and
// encoded and sent by one goroutine each (rtnl.Split); few ops go in
// order over one socket. One entry per op: nil or the kernel's refusal of
// that op. err is a failure of a socket; the ops it did not carry out
// have it as their entry.
func (c *Conn) WriteAny(ops []Op) ([]error, error) {
	if err := checkOps(ops); err != nil {
		return nil, err
	}
	return rtnl.Split(c.cs, len(ops), func(i int) rtnl.Request { return request(ops[i]) })
}

func checkOps(ops []Op) error {
	for i, op := range ops {
		if op.Kind < Add || op.Kind > Delete {
			return fmt.Errorf("tc: op %d: unknown kind %d", i, op.Kind)
		}
	}
	return nil
}

// request is the netlink request of op (of a known kind).
func request(op Op) rtnl.Request {
	switch op.Kind {
	case Add:
		return rtnl.Request{Type: unix.RTM_NEWTFILTER, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: op.Filter.Encode()}
	case Replace:
		return rtnl.Request{Type: unix.RTM_NEWTFILTER, Flags: unix.NLM_F_REPLACE, Data: op.Filter.Encode()}
	default:
		return rtnl.Request{Type: unix.RTM_DELTFILTER, Data: op.Filter.AppendDelete(make([]byte, 0, 48))}
	}
}

// Do carries out one op and returns its error.
func (c *Conn) Do(op Op) error {
	errs, err := c.Write([]Op{op})
	if err != nil {
		return err
	}
	return errs[0]
}

// DumpOptions choose what Dump reads.
type DumpOptions struct {
	// Chains: one dump each (TCA_CHAIN); nil: every chain in one dump.
	Chains []uint32
	// Terse asks for handle, flags and, per action, kind, counters and
	// cookie only (TCA_DUMP_FLAGS_TERSE): no keys.
	Terse bool
	// Parent: 0 is Ingress.
	Parent uint32
}

// dumpRetries bounds how often a dump the kernel interrupted is started
// over.
const dumpRetries = 20

// Dump returns the flower filters of a device (see DumpOptions), in the
// kernel's order.
func (c *Conn) Dump(ifindex int, o DumpOptions) ([]Filter, error) {
	var out []Filter
	err := c.DumpFunc(ifindex, o, func(f *Filter) { out = append(out, *f) })
	return out, err
}

// DumpFunc calls fn for every flower filter of a device; f is fn's to
// keep.
func (c *Conn) DumpFunc(ifindex int, o DumpOptions, fn func(f *Filter)) error {
	var batch []Filter
	return c.dumpChains(ifindex, o, func() { batch = batch[:0] }, func(b []byte) error {
		f, ok, err := Decode(b)
		if ok {
			batch = append(batch, f)
		}
		return err
	}, func() {
		for i := range batch {
			fn(&batch[i])
		}
	})
}

// dumpChains dumps each chain of o (every chain when none) and calls msg
// for every message of the answer, then done once that chain's dump is
// whole: a dump the kernel interrupted is started over, after reset.
// The errors of msg are returned, joined.
func (c *Conn) dumpChains(ifindex int, o DumpOptions, reset func(), msg func(b []byte) error, done func()) error {
	chains := o.Chains
	if chains == nil {
		chains = []uint32{^uint32(0)} // every chain
	}
	parent := o.Parent
	if parent == 0 {
		parent = Ingress
	}
	for _, chain := range chains {
		req := tcmsg(nil, ifindex, 0, parent, 0)
		e := rtnl.NewEncoder(req)
		if chain != ^uint32(0) {
			e.U32(unix.TCA_CHAIN, chain)
		}
		if o.Terse {
			e.Put(unix.TCA_DUMP_FLAGS, bitfield32(TCA_DUMP_FLAGS_TERSE, TCA_DUMP_FLAGS_TERSE))
		}
		req = e.Bytes()
		var err error
		for range dumpRetries {
			reset()
			var errs []error
			err = c.c.Dump(unix.RTM_GETTFILTER, req, func(_ rtnl.Header, b []byte) error {
				if err := msg(b); err != nil {
					errs = append(errs, err)
				}
				return nil
			})
			if err == nil {
				err = errors.Join(errs...)
			}
			if !errors.Is(err, rtnl.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("tc: dumping filters of ifindex %d: %w", ifindex, err)
		}
		done()
	}
	return nil
}

// bitfield32 is struct nla_bitfield32.
func bitfield32(value, selector uint32) []byte {
	return binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, value), selector)
}

// Qdisc is a queueing discipline of a device.
type Qdisc struct {
	Ifindex        int
	Handle, Parent uint32
	Kind           string
}

// Qdiscs lists the qdiscs of every device.
func (c *Conn) Qdiscs() ([]Qdisc, error) {
	var out []Qdisc
	var err error
	for range dumpRetries {
		out = out[:0]
		err = c.c.Dump(unix.RTM_GETQDISC, tcmsg(nil, 0, 0, 0, 0), func(_ rtnl.Header, b []byte) error {
			h, err := DecodeHead(b)
			if err != nil {
				return err
			}
			q := Qdisc{Ifindex: h.Ifindex, Handle: h.Handle, Parent: h.Parent}
			d := rtnl.NewDecoder(b[20:])
			for d.Next() {
				if d.Type() == unix.TCA_KIND {
					q.Kind = d.String()
				}
			}
			out = append(out, q)
			return d.Err()
		})
		if !errors.Is(err, rtnl.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tc: listing qdiscs: %w", err)
	}
	return out, nil
}

// AddClsact gives a device a clsact qdisc (EEXIST when it has one).
func (c *Conn) AddClsact(ifindex int) error {
	e := rtnl.NewEncoder(tcmsg(nil, ifindex, TC_H_CLSACT&0xffff0000, TC_H_CLSACT, 0))
	e.String(unix.TCA_KIND, "clsact")
	errs, err := c.c.Do([]rtnl.Request{{Type: unix.RTM_NEWQDISC, Flags: unix.NLM_F_CREATE | unix.NLM_F_EXCL, Data: e.Bytes()}})
	if err != nil {
		return fmt.Errorf("tc: clsact on ifindex %d: %w", ifindex, err)
	}
	if errs[0] != nil {
		return fmt.Errorf("tc: clsact on ifindex %d: %w", ifindex, errs[0])
	}
	return nil
}

// Error is the kernel's refusal of one request: its errno (errors.Is and
// errors.As see it) and the extended acknowledgement's message.
type Error = rtnl.Error
