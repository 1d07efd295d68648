package nl

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// exprsOf turns a rule of an NftTable into nftables expressions; sets and
// chains are the table's, by name.
func exprsOf(r NftRule, sets map[string]*nftables.Set, chains map[string]*nftables.Chain) ([]expr.Any, error) {
	var out []expr.Any
	for _, m := range r.Match {
		x, err := matchExprs(m, sets)
		if err != nil {
			return nil, err
		}
		out = append(out, x...)
	}
	if r.Counter {
		out = append(out, &expr.Counter{})
	}
	switch a := r.Action.(type) {
	case nil:
	case Accept:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	case Drop:
		out = append(out, &expr.Verdict{Kind: expr.VerdictDrop})
	case Return:
		out = append(out, &expr.Verdict{Kind: expr.VerdictReturn})
	case Jump:
		if chains[a.Chain] == nil {
			return nil, fmt.Errorf("jump to %s: no such chain in the table", a.Chain)
		}
		out = append(out, &expr.Verdict{Kind: expr.VerdictJump, Chain: a.Chain})
	case Masquerade:
		out = append(out, &expr.Masq{})
	case Notrack:
		out = append(out, &expr.Notrack{})
	case LearnPair:
		s := sets[a.Set]
		if s == nil {
			return nil, fmt.Errorf("update of %s: no such set in the table", a.Set)
		}
		if s.KeyType != pairType || !s.Dynamic {
			return nil, fmt.Errorf("update of %s: not a dynamic set of %s", a.Set, pairType.Name)
		}
		// The key fills register 1 (the name, IFNAMSIZ bytes) and the
		// start of register 2 (the address); the set's timeout applies.
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
			&expr.Dynset{SrcRegKey: 1, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_UPDATE})
	case OrMark:
		// mark | m is (mark & ^m) ^ m.
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binary.NativeEndian.AppendUint32(nil, ^a.Mark), Xor: binary.NativeEndian.AppendUint32(nil, a.Mark)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
	default:
		return nil, fmt.Errorf("unknown action %T", a)
	}
	return out, nil
}

func cmpOp(not bool) expr.CmpOp {
	if not {
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

// addrOffset is the offset of the source (or destination) address in the
// IPv4 or IPv6 header, and its length.
func addrOffset(v6, dst bool) (off, n uint32) {
	switch {
	case v6 && dst:
		return 24, 16
	case v6:
		return 8, 16
	case dst:
		return 16, 4
	}
	return 12, 4
}

func matchExprs(m NftMatch, sets map[string]*nftables.Set) ([]expr.Any, error) {
	switch m := m.(type) {
	case IfName:
		key := expr.MetaKeyIIFNAME
		if m.Out {
			key = expr.MetaKeyOIFNAME
		}
		data := []byte(m.Name)
		if !m.Prefix {
			data = make([]byte, unix.IFNAMSIZ)
			copy(data, m.Name)
		}
		return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: cmpOp(m.Not), Register: 1, Data: data}}, nil
	case Family:
		proto := []byte{unix.NFPROTO_IPV4}
		if m.IPv6 {
			proto = []byte{unix.NFPROTO_IPV6}
		}
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: proto}}, nil
	case L4Proto:
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{m.Proto}}}, nil
	case Addr:
		if !m.Prefix.IsValid() {
			return nil, fmt.Errorf("address match without a prefix")
		}
		off, n := addrOffset(m.Prefix.Addr().Is6(), m.Dst)
		load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
		if m.Prefix.IsSingleIP() {
			return []expr.Any{load, &expr.Cmp{Op: cmpOp(m.Not), Register: 1, Data: m.Prefix.Addr().AsSlice()}}, nil
		}
		mask := net.CIDRMask(m.Prefix.Bits(), int(n)*8)
		return []expr.Any{load,
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
			&expr.Cmp{Op: cmpOp(m.Not), Register: 1, Data: m.Prefix.Masked().Addr().AsSlice()}}, nil
	case AddrIn:
		s := sets[m.Set]
		if s == nil {
			return nil, fmt.Errorf("lookup in %s: no such set in the table", m.Set)
		}
		off, n := addrOffset(m.IPv6, m.Dst)
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}}, nil
	case DPort:
		from, to := binary.BigEndian.AppendUint16(nil, m.From), binary.BigEndian.AppendUint16(nil, max(m.To, m.From))
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: from, ToData: to}}, nil
	case CtState:
		var bits uint32
		if m.Established {
			bits |= expr.CtStateBitESTABLISHED
		}
		if m.Related {
			bits |= expr.CtStateBitRELATED
		}
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)}}, nil
	case ICMPv6Type:
		out := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		}
		if m.To == 0 || m.To == m.From {
			return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{m.From}}), nil
		}
		return append(out, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{m.From}, ToData: []byte{m.To}}), nil
	case Ether:
		mac, err := net.ParseMAC(m.MAC)
		if err != nil {
			return nil, fmt.Errorf("ether address %q: %w", m.MAC, err)
		}
		off := uint32(6)
		if m.Dst {
			off = 0
		}
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: off, Len: 6},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mac}}, nil
	case EtherUnicast:
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{1}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}}, nil
	}
	return nil, fmt.Errorf("unknown match %T", m)
}

// counted returns the packets and bytes of a rule's counter.
func counted(exprs []expr.Any) (packets, bytes uint64, ok bool) {
	for _, e := range exprs {
		if c, is := e.(*expr.Counter); is {
			packets += c.Packets
			bytes += c.Bytes
			ok = true
		}
	}
	return packets, bytes, ok
}
