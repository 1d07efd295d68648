package nltest

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The elements of a table's sets as the kernel reads and deletes them,
// and what a rule's LearnPair adds.

// set is the index of a table's set of that name, -1 when there is none.
func (h *table) set(name string) int {
	return slices.IndexFunc(h.sets, func(s nl.NftSet) bool { return s.Name == name })
}

// expire drops the dynamic set elements whose time is up, as the
// kernel's garbage collection does (a read never shows them).
func (h *table) expire(now time.Time) {
	for _, ps := range h.pairs {
		for p, until := range ps {
			if !until.IsZero() && !now.Before(until) {
				delete(ps, p)
			}
		}
	}
}

// elements lists set i's elements, as SetElements reads them.
func (h *table) elements(i int, now time.Time) ([]nl.NftElement, error) {
	s := h.sets[i]
	var out []nl.NftElement
	switch s.Key {
	case nl.SetKeyAddr:
		for a := range h.elems[i] {
			out = append(out, nl.NftElement{Addr: a})
		}
	case nl.SetKeyIfNameEther:
		for p, until := range h.pairs[i] {
			e := nl.NftElement{IfName: p.ifname, MAC: p.mac}
			if !until.IsZero() {
				e.Expires = until.Sub(now)
			}
			out = append(out, e)
		}
	default:
		return nil, fmt.Errorf("key type %d: not one SetElements reads", uint8(s.Key))
	}
	slices.SortFunc(out, func(a, b nl.NftElement) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if c := strings.Compare(a.IfName, b.IfName); c != 0 {
			return c
		}
		return strings.Compare(a.MAC, b.MAC)
	})
	return out, nil
}

func (k *kernel) SetElements(f nl.NftFamily, table, set string) ([]nl.NftElement, error) {
	if err := checkFamily(f); err != nil {
		return nil, fmt.Errorf("nl: nftables: set %s of %s: %w", set, table, err)
	}
	var out []nl.NftElement
	err := k.do(func(n *NS) error {
		t, _ := n.table(f, table)
		if t == nil {
			return nil
		}
		i := t.set(set)
		if i < 0 {
			return nil
		}
		now := time.Now()
		t.expire(now)
		var err error
		if out, err = t.elements(i, now); err != nil {
			return fmt.Errorf("nl: nftables: element of set %s of %s %s: %w", set, f, table, err)
		}
		return nil
	})
	return out, err
}

func (k *kernel) DeleteSetElements(f nl.NftFamily, table, set string, es []nl.NftElement) (int, error) {
	if err := checkFamily(f); err != nil {
		return 0, fmt.Errorf("nl: nftables: set %s of %s: %w", set, table, err)
	}
	n := 0
	err := k.do(func(ns *NS) error {
		t, _ := ns.table(f, table)
		if t == nil {
			return nil
		}
		i := t.set(set)
		if i < 0 {
			return nil
		}
		t.expire(time.Now())
		for _, e := range es {
			switch t.sets[i].Key {
			case nl.SetKeyAddr:
				if t.elems[i][e.Addr] {
					delete(t.elems[i], e.Addr)
					n++
				}
			case nl.SetKeyIfNameEther:
				// What is not a valid key is not held.
				if p, err := pairOf(e.IfName, e.MAC); err == nil {
					if _, held := t.pairs[i][p]; held {
						delete(t.pairs[i], p)
						n++
					}
				}
			}
		}
		if n > 0 {
			k.write()
		}
		return nil
	})
	return n, err
}

// pairOf is the element of an interface name and MAC, as the kernel
// keys it; an error where the real handle's key cannot be made.
func pairOf(ifname, mac string) (learned, error) {
	if ifname == "" || len(ifname) >= unix.IFNAMSIZ {
		return learned{}, fmt.Errorf("interface name %q: not 1 to %d bytes", ifname, unix.IFNAMSIZ-1)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return learned{}, fmt.Errorf("ether address %q: not a MAC-48 address", mac)
	}
	return learned{ifname, hw.String()}, nil
}
