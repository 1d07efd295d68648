package tc

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Terse is a flower filter as a terse dump carries it: no keys; of its
// actions, how many there are, the first cookie and the first action's
// counters.
type Terse struct {
	Chain, Handle uint32
	Prio, Proto   uint16 // Proto in host order, as Filter's
	Flags         uint32 // TCA_CLS_FLAGS_*
	Actions       int
	// Cookie is the first action cookie (shared backing store with the
	// other filters of the dump: not to be appended to).
	Cookie []byte
	// Stats are the first action's counters.
	Stats Stats
}

// DumpTerse calls fn for every flower filter of the given chains (nil:
// every chain) of ifindex's ingress, from terse dumps
// (TCA_DUMP_FLAGS_TERSE), decoding only what they carry: nothing is made
// per filter but its cookie's bytes, kept in one store per chain. A dump
// the kernel interrupted is started over; fn sees only a whole one's
// filters. f is fn's for the call only (its Cookie is fn's to keep).
func (c *Conn) DumpTerse(ifindex int, chains []uint32, fn func(f *Terse)) error {
	var batch []Terse
	var store []byte
	return c.dumpChains(ifindex, DumpOptions{Chains: chains, Terse: true}, func() { batch, store = batch[:0], nil }, func(b []byte) error {
		var f Terse
		ok, ck, err := decodeTerse(b, &f)
		if !ok {
			return err
		}
		if ck != nil {
			if len(store)+len(ck) > cap(store) {
				store = make([]byte, 0, max(64<<10, len(ck)))
			}
			n := len(store)
			store = append(store, ck...)
			f.Cookie = store[n:len(store):len(store)]
		}
		batch = append(batch, f)
		return nil
	}, func() {
		for i := range batch {
			fn(&batch[i])
		}
	})
}

var flowerKind, fwKind = []byte("flower"), []byte(KindFw)

// TerseOf is what a terse dump would carry of f.
func TerseOf(f *Filter) Terse {
	t := Terse{Chain: f.Chain, Handle: f.Handle, Prio: f.Prio, Proto: f.Proto, Flags: f.Flags, Actions: len(f.Actions)}
	for _, a := range f.Actions {
		if a.Cookie != nil {
			t.Cookie = a.Cookie
			break
		}
	}
	if len(f.Actions) > 0 {
		t.Stats = f.Actions[0].Stats
	}
	return t
}

// decodeTerse decodes a filter message of a terse dump into f; ok is
// false for what is not a flower or fw filter (a chain's or priority's
// head, another classifier). ck is the first action cookie, not
// copied.
func decodeTerse(b []byte, f *Terse) (ok bool, ck []byte, err error) {
	head, err := DecodeHead(b)
	if err != nil {
		return false, nil, err
	}
	f.Handle, f.Prio, f.Proto = head.Handle, head.Prio, head.Proto
	var opts []byte
	flower, fw := false, false
	d := rtnl.NewDecoder(b[20:])
	for d.Next() {
		switch d.Type() {
		case unix.TCA_KIND:
			v := d.Bytes()
			for len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			flower, fw = string(v) == string(flowerKind), string(v) == string(fwKind)
		case unix.TCA_CHAIN:
			f.Chain = d.U32()
		case unix.TCA_OPTIONS:
			opts = d.Bytes()
		}
	}
	if err := d.Err(); err != nil {
		return false, nil, fmt.Errorf("tc: filter attributes: %w", err)
	}
	if !flower && !fw || f.Handle == 0 || opts == nil {
		return false, nil, nil
	}
	var actAttr uint16 = TCA_FLOWER_ACT
	if fw {
		actAttr = TCA_FW_ACT
	}
	od := rtnl.NewDecoder(opts)
	for od.Next() {
		switch t := od.Type(); {
		case flower && t == TCA_FLOWER_FLAGS:
			f.Flags = od.U32()
		case t == actAttr:
			ad := od.Nested()
			for ad.Next() {
				first := f.Actions == 0
				f.Actions++
				a := ad.Nested()
				for a.Next() {
					switch a.Type() {
					case TCA_ACT_COOKIE:
						if ck == nil {
							ck = a.Bytes()
						}
					case TCA_ACT_STATS:
						if first {
							f.Stats = decodeStats(a.Bytes())
						}
					}
				}
				if err := a.Err(); err != nil {
					return false, nil, fmt.Errorf("tc: filter %#x: action: %w", f.Handle, err)
				}
			}
			if err := ad.Err(); err != nil {
				return false, nil, fmt.Errorf("tc: filter %#x: actions: %w", f.Handle, err)
			}
		}
	}
	if err := od.Err(); err != nil {
		return false, nil, fmt.Errorf("tc: filter %#x: options: %w", f.Handle, err)
	}
	return true, ck, nil
}
