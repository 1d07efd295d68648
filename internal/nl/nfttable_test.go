package nl

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
)

func TestNftStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{NftRule{Match: []NftMatch{IfName{Out: true, Name: "skvx"}, EtherUnicast{}}, Action: LearnPair{Set: "seen"}}.String(),
			`oifname "skvx" ether daddr & 01:00:00:00:00:00 == 00:00:00:00:00:00 update @seen { iifname . ether daddr }`},
		{NftSet{Name: "seen", Key: SetKeyIfNameEther, Timeout: 10 * time.Second, Size: 65536}.Decl(),
			"type ifname . ether_addr; flags dynamic,timeout; timeout 10000ms; size 65536;"},
		{NftSet{Name: "seen", Key: SetKeyIfNameEther}.Decl(), "type ifname . ether_addr; flags dynamic;"},
		{NftSet{Name: "a", IPv6: true}.Decl(), "type ipv6_addr;"},
		{NftSet{Name: "a"}.Decl(), "type ipv4_addr;"},
		{NftInet.String(), "inet"},
		{NftBridge.String(), "bridge"},
		{NftFamily(9).String(), "family9"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	a := NftRule{Tag: "learn", Match: []NftMatch{EtherUnicast{}}, Action: LearnPair{Set: "seen"}}
	b := NftRule{Tag: "learn", Match: []NftMatch{EtherUnicast{}}, Action: LearnPair{Set: "seen2"}}
	if a.Digest() == b.Digest() {
		t.Error("rules learning into different sets have one digest")
	}
}

func TestSetOf(t *testing.T) {
	table := &nftables.Table{Family: nftables.TableFamilyBridge, Name: "x"}
	want := NftSet{Name: "seen", Key: SetKeyIfNameEther, Timeout: 10 * time.Second, Size: 100}
	s, err := setOf(table, want)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Dynamic || !s.HasTimeout || !s.Concatenation || s.KeyType.Bytes != 24 || !sameSet(s, want) {
		t.Errorf("set %+v", s)
	}
	for _, other := range []NftSet{{Name: "seen", Key: SetKeyIfNameEther, Timeout: 20 * time.Second, Size: 100},
		{Name: "seen", Key: SetKeyIfNameEther, Size: 100}, {Name: "seen", Key: SetKeyIfNameEther, Timeout: 10 * time.Second},
		{Name: "seen"}} {
		if sameSet(s, other) {
			t.Errorf("%+v is the same as %+v", other, want)
		}
	}
	for _, bad := range []NftSet{{Name: "s", Key: SetKeyIfNameEther, Timeout: time.Microsecond},
		{Name: "s", Key: SetKeyIfNameEther, Timeout: -time.Second}, {Name: "s", Key: 7}} {
		if _, err := setOf(table, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestElementOf(t *testing.T) {
	key, err := pairKey("skl1", "02:00:00:00:AC:01")
	if err != nil {
		t.Fatal(err)
	}
	e, err := elementOf(pairType, nftables.SetElement{Key: key, Expires: time.Second})
	if err != nil || e != (NftElement{IfName: "skl1", MAC: "02:00:00:00:ac:01", Expires: time.Second}) {
		t.Errorf("%+v, %v", e, err)
	}
	e, err = elementOf(nftables.TypeIPAddr, nftables.SetElement{Key: []byte{192, 0, 2, 1}})
	if err != nil || e.Addr != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("%+v, %v", e, err)
	}
	for _, bad := range []struct {
		typ nftables.SetDatatype
		key []byte
	}{{pairType, key[:10]}, {nftables.TypeIPAddr, key[:16]}, {nftables.TypeIP6Addr, []byte{1, 2, 3, 4}}, {nftables.TypeMark, key[:4]}} {
		if _, err := elementOf(bad.typ, nftables.SetElement{Key: bad.key}); err == nil {
			t.Errorf("%s %x: no error", bad.typ.Name, bad.key)
		}
	}
	for _, bad := range [][2]string{{"", "02:00:00:00:00:01"}, {"0123456789abcdef", "02:00:00:00:00:01"}, {"x", "bad"}, {"x", "00:00:00:00:fe:80:00:00"}} {
		if _, err := pairKey(bad[0], bad[1]); err == nil {
			t.Errorf("%q %q: no error", bad[0], bad[1])
		}
	}
}
