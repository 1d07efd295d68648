package nl

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// The sets of a table: their declarations, SetTable's sync of address
// sets' elements, and the reading and deleting of a set's elements.

// pairType is the key type of a SetKeyIfNameEther set: an interface name
// (IFNAMSIZ bytes, NUL-padded) then an Ethernet address padded to the
// 4-byte register size, 24 bytes.
var pairType = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)

func keyType(v6 bool) nftables.SetDatatype {
	if v6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

// setOf is the library's declaration of s in table.
func setOf(table *nftables.Table, s NftSet) (*nftables.Set, error) {
	switch s.Key {
	case SetKeyAddr:
		return &nftables.Set{Table: table, Name: s.Name, KeyType: keyType(s.IPv6)}, nil
	case SetKeyIfNameEther:
		if s.Timeout < 0 || s.Timeout > 0 && s.Timeout < time.Millisecond {
			return nil, fmt.Errorf("set %s: timeout %v: not a whole number of milliseconds above 0", s.Name, s.Timeout)
		}
		return &nftables.Set{Table: table, Name: s.Name, KeyType: pairType, Concatenation: true, Dynamic: true,
			HasTimeout: s.Timeout > 0, Timeout: s.Timeout.Truncate(time.Millisecond), Size: s.Size}, nil
	}
	return nil, fmt.Errorf("set %s: key: unknown %d", s.Name, uint8(s.Key))
}

// sameSet reports whether the kernel's set h is declared as s says.
func sameSet(h *nftables.Set, s NftSet) bool {
	switch s.Key {
	case SetKeyAddr:
		return h.KeyType == keyType(s.IPv6) && !h.Dynamic && !h.HasTimeout
	case SetKeyIfNameEther:
		return h.KeyType == pairType && h.Dynamic && h.HasTimeout == (s.Timeout > 0) &&
			h.Timeout == s.Timeout.Truncate(time.Millisecond) && h.Size == s.Size
	}
	return false
}

// elements are the elements SetTable writes of s: an address set's.
func elements(s NftSet) []nftables.SetElement {
	if s.Key != SetKeyAddr {
		return nil
	}
	var out []nftables.SetElement
	for _, a := range s.Elems {
		if a.Is6() == s.IPv6 {
			out = append(out, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	return out
}

// setChunk is how many elements go in one netlink message: the element
// list is one attribute, whose length field has 16 bits, so a large set
// sent whole is cut short without an error. The messages of a batch still
// apply atomically.
const setChunk = 1000

func chunked(es []nftables.SetElement, f func([]nftables.SetElement) error) error {
	for len(es) > 0 {
		n := min(len(es), setChunk)
		if err := f(es[:n]); err != nil {
			return err
		}
		es = es[n:]
	}
	return nil
}

// syncElements adds and deletes the address set elements that differ
// from t's, in one transaction, and returns how many it changed. The
// elements of dynamic sets are the kernel's: it leaves them alone.
func syncElements(c *nftables.Conn, t NftTable, have map[string]*nftables.Set) (int, error) {
	n := 0
	for _, s := range t.Sets {
		if s.Dynamic() {
			continue
		}
		set := have[s.Name]
		cur, err := c.GetSetElements(set)
		if err != nil {
			return 0, fmt.Errorf("set %s elements: %w", s.Name, err)
		}
		in := map[netip.Addr]bool{}
		for _, e := range cur {
			if a, ok := netip.AddrFromSlice(e.Key); ok {
				in[a] = true
			}
		}
		want := map[netip.Addr]bool{}
		var add, del []nftables.SetElement
		for _, e := range elements(s) {
			a, _ := netip.AddrFromSlice(e.Key)
			want[a] = true
			if !in[a] {
				add = append(add, e)
			}
		}
		for a := range in {
			if !want[a] {
				del = append(del, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		if err := chunked(add, func(es []nftables.SetElement) error { return c.SetAddElements(set, es) }); err != nil {
			return 0, fmt.Errorf("set %s: %w", s.Name, err)
		}
		if err := chunked(del, func(es []nftables.SetElement) error { return c.SetDeleteElements(set, es) }); err != nil {
			return 0, fmt.Errorf("set %s: %w", s.Name, err)
		}
		n += len(add) + len(del)
	}
	if n == 0 {
		return 0, nil
	}
	if err := c.Flush(); err != nil {
		return 0, fmt.Errorf("set elements: %w", err)
	}
	return n, nil
}

// pairKey is the key of a SetKeyIfNameEther element.
func pairKey(ifname, mac string) ([]byte, error) {
	if ifname == "" || len(ifname) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("interface name %q: not 1 to %d bytes", ifname, unix.IFNAMSIZ-1)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("ether address %q: not a MAC-48 address", mac)
	}
	key := make([]byte, pairType.Bytes)
	copy(key, ifname)
	copy(key[unix.IFNAMSIZ:], hw)
	return key, nil
}

// elementOf decodes the key of an element of a set of type typ.
func elementOf(typ nftables.SetDatatype, e nftables.SetElement) (NftElement, error) {
	out := NftElement{Expires: e.Expires}
	switch typ {
	case nftables.TypeIPAddr, nftables.TypeIP6Addr:
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok || int(typ.Bytes) != len(e.Key) {
			return out, fmt.Errorf("key %x: not a %s", e.Key, typ.Name)
		}
		out.Addr = a
	case pairType:
		if len(e.Key) < unix.IFNAMSIZ+6 {
			return out, fmt.Errorf("key %x: shorter than %s", e.Key, typ.Name)
		}
		name, _, _ := bytes.Cut(e.Key[:unix.IFNAMSIZ], []byte{0})
		out.IfName, out.MAC = string(name), net.HardwareAddr(e.Key[unix.IFNAMSIZ:unix.IFNAMSIZ+6]).String()
	default:
		return out, fmt.Errorf("key type %s: not one SetElements reads", typ.Name)
	}
	return out, nil
}

// sortElements orders elements by address, then interface name and MAC.
func sortElements(es []NftElement) {
	slices.SortFunc(es, func(a, b NftElement) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if c := strings.Compare(a.IfName, b.IfName); c != 0 {
			return c
		}
		return strings.Compare(a.MAC, b.MAC)
	})
}

// setByName is the kernel's set of that name, nil when it or its table
// is not there.
func setByName(c *nftables.Conn, f NftFamily, table, name string) (*nftables.Set, error) {
	fam, err := familyOf(f)
	if err != nil {
		return nil, err
	}
	s, err := c.GetSetByName(&nftables.Table{Family: fam, Name: table}, name)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return s, err
}

func (k *real) SetElements(f NftFamily, table, set string) ([]NftElement, error) {
	c, err := k.nft()
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: %w", err)
	}
	s, err := setByName(c, f, table, set)
	if err != nil || s == nil {
		if err != nil {
			err = fmt.Errorf("nl: nftables: set %s of %s %s: %w", set, f, table, err)
		}
		return nil, err
	}
	es, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("nl: nftables: elements of set %s of %s %s: %w", set, f, table, err)
	}
	out := make([]NftElement, 0, len(es))
	for _, e := range es {
		x, err := elementOf(s.KeyType, e)
		if err != nil {
			return nil, fmt.Errorf("nl: nftables: element of set %s of %s %s: %w", set, f, table, err)
		}
		out = append(out, x)
	}
	sortElements(out)
	return out, nil
}

func (k *real) DeleteSetElements(f NftFamily, table, set string, es []NftElement) (int, error) {
	c, err := k.nft()
	if err != nil {
		return 0, fmt.Errorf("nl: nftables: %w", err)
	}
	// The kernel refuses to delete an element it does not hold (and
	// may expire one between the read and the write): delete what it
	// holds, and read again when it refused.
	for try := 0; ; try++ {
		n, err := deleteHeld(c, f, table, set, es)
		if err == nil || try == 2 || !errors.Is(err, unix.ENOENT) {
			if n > 0 {
				k.w()
			}
			if err != nil {
				return 0, fmt.Errorf("nl: nftables: delete elements of set %s of %s %s: %w", set, f, table, err)
			}
			return n, nil
		}
	}
}

// deleteHeld deletes the elements of es that the set holds, in one
// transaction, and returns how many.
func deleteHeld(c *nftables.Conn, f NftFamily, table, set string, es []NftElement) (int, error) {
	s, err := setByName(c, f, table, set)
	if err != nil || s == nil {
		return 0, err
	}
	cur, err := c.GetSetElements(s)
	if err != nil {
		return 0, fmt.Errorf("elements: %w", err)
	}
	held := map[NftElement]bool{}
	for _, e := range cur {
		x, err := elementOf(s.KeyType, e)
		if err != nil {
			return 0, err
		}
		x.Expires = 0
		held[x] = true
	}
	var del []nftables.SetElement
	for _, e := range es {
		e.Expires = 0
		if hw, err := net.ParseMAC(e.MAC); err == nil {
			e.MAC = hw.String() // as the kernel's are read
		}
		if !held[e] {
			continue
		}
		delete(held, e) // once
		key := e.Addr.AsSlice()
		if s.KeyType == pairType {
			if key, err = pairKey(e.IfName, e.MAC); err != nil {
				return 0, err
			}
		}
		del = append(del, nftables.SetElement{Key: key})
	}
	if len(del) == 0 {
		return 0, nil
	}
	if err := chunked(del, func(x []nftables.SetElement) error { return c.SetDeleteElements(s, x) }); err != nil {
		return 0, err
	}
	if err := c.Flush(); err != nil {
		return 0, err
	}
	return len(del), nil
}
