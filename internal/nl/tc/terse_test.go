package tc

import (
	"encoding/binary"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// decodeTerse reads of a filter what Decode reads: its place, flags,
// number of actions, first cookie and the first action's counters.
func TestDecodeTerse(t *testing.T) {
	msgs := [][]byte{terseMessage(0x5301, 3, 42, []byte("sk0123456789abcd"), 7, 1234, 9)}
	for _, f := range codecFilters() {
		msgs = append(msgs, f.Encode())
	}
	for i, b := range msgs {
		full, ok, err := Decode(b)
		if err != nil || !ok {
			t.Fatalf("Decode: ok %v, %v", ok, err)
		}
		if s := full.Actions[0].Stats; i == 0 && (s.Bytes != 1234 || s.Packets != 9) {
			t.Errorf("counters %+v, want 1234 bytes, 9 packets", s)
		}
		var got Terse
		ok, ck, err := decodeTerse(b, &got)
		if err != nil || !ok {
			t.Fatalf("decodeTerse: ok %v, %v", ok, err)
		}
		want := Terse{Chain: full.Chain, Handle: full.Handle, Prio: full.Prio, Proto: full.Proto, Flags: full.Flags,
			Actions: len(full.Actions), Stats: full.Actions[0].Stats}
		for _, a := range full.Actions {
			if a.Cookie != nil {
				want.Cookie = a.Cookie
				break
			}
		}
		got.Cookie = ck
		if !slices.Equal(got.Cookie, want.Cookie) || got.Cookie == nil != (want.Cookie == nil) {
			t.Errorf("cookie %x, want %x", got.Cookie, want.Cookie)
		}
		got.Cookie, want.Cookie = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decodeTerse = %+v, want %+v", got, want)
		}
	}
	// What is not a flower filter: a priority's head (handle 0).
	var f Terse
	if ok, _, err := decodeTerse(terseMessage(0x5301, 3, 0, nil, 0, 0, 0), &f); ok || err != nil {
		t.Errorf("a filter of handle 0: ok %v, %v", ok, err)
	}
}

// terseMessage is a filter as a terse dump has it: kind, chain, flags
// and one gact action with its cookie and counters (basic and 64-bit
// packets).
func terseMessage(prio uint16, chain, handle uint32, cookie []byte, flags uint32, bytes, packets uint64) []byte {
	e := rtnl.NewEncoder(tcmsg(nil, 7, handle, Ingress, uint32(prio)<<16|uint32(htons(unix.ETH_P_ALL))))
	e.String(unix.TCA_KIND, "flower")
	e.U32(unix.TCA_CHAIN, chain)
	e.Nest(unix.TCA_OPTIONS, func(e *rtnl.Encoder) {
		e.U32(TCA_FLOWER_FLAGS, flags)
		e.Nest(TCA_FLOWER_ACT, func(e *rtnl.Encoder) {
			e.Nest(1, func(e *rtnl.Encoder) {
				e.String(TCA_ACT_KIND, KindGact)
				if cookie != nil {
					e.Put(TCA_ACT_COOKIE, cookie)
				}
				e.Nest(TCA_ACT_STATS, func(e *rtnl.Encoder) {
					basic := binary.NativeEndian.AppendUint64(nil, bytes)
					basic = binary.NativeEndian.AppendUint32(basic, uint32(packets))
					e.Put(TCA_STATS_BASIC, append(basic, 0, 0, 0, 0))
					e.Put(TCA_STATS_PKT64, binary.NativeEndian.AppendUint64(nil, packets))
				})
			})
		})
	})
	return e.Bytes()
}

// A terse dump's filter message (the counters' read decodes 20,000 of
// them): decoded whole (Decode) against decodeTerse.
func BenchmarkDecodeTerse(b *testing.B) {
	msg := terseMessage(0x5301, 3, 42, []byte("sk0123456789abcd"), 7, 1234, 9)
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := Decode(msg); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("decodeTerse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f Terse
			if ok, _, err := decodeTerse(msg, &f); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}
