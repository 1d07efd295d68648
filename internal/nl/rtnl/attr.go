package rtnl

import (
	"encoding/binary"
	"fmt"
)

// nlaNested is NLA_F_NESTED (include/uapi/linux/netlink.h); the kernel
// accepts nested attributes with or without it.
const (
	nlaNested   = 1 << 15
	nlaTypeMask = 1<<14 - 1
)

// Encoder appends netlink attributes (struct nlattr, 4-byte aligned) to a
// buffer. Integers in host order unless the method says big endian.
type Encoder struct {
	b []byte
}

// NewEncoder returns an encoder appending to b.
func NewEncoder(b []byte) *Encoder { return &Encoder{b: b} }

// Bytes returns what was encoded.
func (e *Encoder) Bytes() []byte { return e.b }

func (e *Encoder) header(typ uint16, n int) {
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(4+n))
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
}

func (e *Encoder) pad() {
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}

// Put appends an attribute holding v.
func (e *Encoder) Put(typ uint16, v []byte) {
	e.header(typ, len(v))
	e.b = append(e.b, v...)
	e.pad()
}

// String appends a NUL-terminated string.
func (e *Encoder) String(typ uint16, s string) {
	e.header(typ, len(s)+1)
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
	e.pad()
}

// U8 appends a byte.
func (e *Encoder) U8(typ uint16, v uint8) { e.header(typ, 1); e.b = append(e.b, v); e.pad() }

// U16 appends a host-order 16-bit value.
func (e *Encoder) U16(typ uint16, v uint16) {
	e.header(typ, 2)
	e.b = binary.NativeEndian.AppendUint16(e.b, v)
	e.pad()
}

// BE16 appends a big-endian 16-bit value.
func (e *Encoder) BE16(typ uint16, v uint16) {
	e.header(typ, 2)
	e.b = binary.BigEndian.AppendUint16(e.b, v)
	e.pad()
}

// U32 appends a host-order 32-bit value.
func (e *Encoder) U32(typ uint16, v uint32) {
	e.header(typ, 4)
	e.b = binary.NativeEndian.AppendUint32(e.b, v)
}

// BE32 appends a big-endian 32-bit value.
func (e *Encoder) BE32(typ uint16, v uint32) {
	e.header(typ, 4)
	e.b = binary.BigEndian.AppendUint32(e.b, v)
}

// Nest appends a nested attribute whose contents fn encodes.
func (e *Encoder) Nest(typ uint16, fn func(e *Encoder)) {
	at := len(e.b)
	e.header(typ|nlaNested, 0)
	fn(e)
	binary.NativeEndian.PutUint16(e.b[at:], uint16(len(e.b)-at))
}

// Decoder walks the attributes of a buffer:
//
//	d := rtnl.NewDecoder(b)
//	for d.Next() { switch d.Type() { ... d.U32() ... } }
//	err := d.Err()
type Decoder struct {
	b   []byte
	typ uint16
	v   []byte
	err error
}

// NewDecoder returns a decoder of the attributes in b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Next moves to the next attribute; false at the end or on a malformed
// attribute (see Err).
func (d *Decoder) Next() bool {
	if d.err != nil || len(d.b) < 4 {
		return false
	}
	l := int(binary.NativeEndian.Uint16(d.b))
	if l < 4 || l > len(d.b) {
		d.err = fmt.Errorf("rtnl: attribute of length %d in %d bytes", l, len(d.b))
		return false
	}
	d.typ = binary.NativeEndian.Uint16(d.b[2:]) & nlaTypeMask
	d.v = d.b[4:l]
	d.b = d.b[min((l+3)&^3, len(d.b)):]
	return true
}

// Err is the first malformed attribute met, if any.
func (d *Decoder) Err() error { return d.err }

// Type is the current attribute's type, without the nested and byte
// order flags.
func (d *Decoder) Type() uint16 { return d.typ }

// Bytes is the current attribute's value (not copied).
func (d *Decoder) Bytes() []byte { return d.v }

// String is the value as a string, without its terminating NUL.
func (d *Decoder) String() string {
	v := d.v
	for len(v) > 0 && v[len(v)-1] == 0 {
		v = v[:len(v)-1]
	}
	return string(v)
}

// U8 is the value as a byte (0 when it has another size).
func (d *Decoder) U8() uint8 {
	if len(d.v) != 1 {
		return 0
	}
	return d.v[0]
}

// uint is the value as an n-byte integer in the given order (0 when it
// has another size).
func (d *Decoder) uint(n int, order binary.ByteOrder) uint32 {
	switch {
	case len(d.v) != n:
		return 0
	case n == 2:
		return uint32(order.Uint16(d.v))
	default:
		return order.Uint32(d.v)
	}
}

// U16 is the value in host order (0 when it has another size).
func (d *Decoder) U16() uint16 { return uint16(d.uint(2, binary.NativeEndian)) }

// BE16 is the value as big endian (0 when it has another size).
func (d *Decoder) BE16() uint16 { return uint16(d.uint(2, binary.BigEndian)) }

// U32 is the value in host order (0 when it has another size).
func (d *Decoder) U32() uint32 { return d.uint(4, binary.NativeEndian) }

// BE32 is the value as big endian (0 when it has another size).
func (d *Decoder) BE32() uint32 { return d.uint(4, binary.BigEndian) }

// Nested is a decoder of the current attribute's contents.
func (d *Decoder) Nested() *Decoder { return NewDecoder(d.v) }
