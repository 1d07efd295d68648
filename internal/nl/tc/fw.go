package tc

import (
	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// KindFw is the fw classifier: it matches the packet's mark (skb->mark)
// under a mask, which flower has no key for. A fw filter's handle is the
// mark it matches (Match.Mark: given on create, never chosen by the
// kernel); it takes actions as flower does and has no flags (it is
// never offloaded).
const KindFw = "fw"

// include/uapi/linux/pkt_cls.h: enum TCA_FW_*.
const (
	TCA_FW_UNSPEC = iota
	TCA_FW_CLASSID
	TCA_FW_POLICE
	TCA_FW_INDEV
	TCA_FW_ACT
	TCA_FW_MASK
)

// kind is the filter's classifier: flower unless it is fw.
func (f *Filter) kind() string {
	if f.Kind == KindFw {
		return KindFw
	}
	return "flower"
}

// handle is the tcmsg's handle: a fw filter's is its mark.
func (f *Filter) handle() uint32 {
	if f.Kind == KindFw {
		return f.Match.Mark
	}
	return f.Handle
}

// encodeFw writes a fw filter's options: its mask and actions.
func (f *Filter) encodeFw(e *rtnl.Encoder) {
	e.U32(TCA_FW_MASK, f.Match.MarkMask)
	e.Nest(TCA_FW_ACT, func(e *rtnl.Encoder) {
		for i := range f.Actions {
			e.Nest(uint16(i+1), f.Actions[i].encode)
		}
	})
}

// decodeFw reads a fw filter's options. Without a mask attribute the
// kernel matches the whole mark.
func (f *Filter) decodeFw(b []byte) error {
	d := rtnl.NewDecoder(b)
	f.Match.Mark, f.Match.MarkMask = f.Handle, 0xffffffff
	for d.Next() {
		switch d.Type() {
		case TCA_FW_MASK:
			f.Match.MarkMask = d.U32()
		case TCA_FW_ACT:
			if err := f.decodeActions(d.Nested()); err != nil {
				return err
			}
		}
	}
	return d.Err()
}
