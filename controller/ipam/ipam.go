// Package ipam holds Skiff's address logic without any storage: parsing and
// validating subnets into pools, deciding which addresses are allocatable,
// choosing a free address, and deriving endpoint MAC addresses. The store
// package makes its choices durable in etcd transactions.
//
//	pool, err := ipam.NewPool(ipam.SubnetSpec{CIDR: "192.0.2.0/24"})
//	addr, ok := pool.Next(pool.Start(), func(a netip.Addr) bool { return taken[a] })
package ipam

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
)

// FieldError says which field of an object is wrong and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Range is an inclusive address range.
type Range struct {
	Start, End netip.Addr
}

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.Compare(r.Start) >= 0 && a.Compare(r.End) <= 0
}

// SubnetSpec is a subnet as a user writes it.
type SubnetSpec struct {
	CIDR       string
	Gateway    string
	Ranges     [][2]string
	Exclusions []string
}

// Pool is a validated subnet: what may be allocated from it.
type Pool struct {
	Prefix     netip.Prefix
	Gateway    netip.Addr
	Ranges     []Range // never empty
	Exclusions []netip.Prefix
}

// sameFamily refuses an address of field whose family is not the
// subnet's: an IPv6 gateway on an IPv4 subnet, or the other way round.
func sameFamily(field string, a netip.Addr, p netip.Prefix) error {
	if a.Is4() == p.Addr().Is4() {
		return nil
	}
	return fieldErr(field, "%s is an %s address, but cidr %s is %s: each subnet has one family (make a subnet per family for dual-stack)", a, family(a), p, family(p.Addr()))
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// Smallest subnets: a /30 (v4) or /126 (v6) leaves room for a gateway and
// one endpoint.
const (
	maxBitsV4 = 30
	maxBitsV6 = 126
)

// NewPool validates spec and returns its pool. Errors are *FieldError values
// naming the field (cidr, gateway, ranges[i], exclusions[i]).
func NewPool(spec SubnetSpec) (Pool, error) {
	if spec.CIDR == "" {
		return Pool{}, fieldErr("cidr", "required")
	}
	p, err := netip.ParsePrefix(spec.CIDR)
	if err != nil {
		return Pool{}, fieldErr("cidr", "%q is not a CIDR (want e.g. 192.0.2.0/24 or 2001:db8::/64)", spec.CIDR)
	}
	if p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return Pool{}, fieldErr("cidr", "%q: IPv4-mapped and zoned addresses are not allowed", spec.CIDR)
	}
	if p.Masked() != p {
		return Pool{}, fieldErr("cidr", "%q has host bits set (did you mean %s?)", spec.CIDR, p.Masked())
	}
	if max := maxBits(p.Addr()); p.Bits() > max {
		return Pool{}, fieldErr("cidr", "%q is too small: the prefix length must be at most /%d", spec.CIDR, max)
	}
	pool := Pool{Prefix: p}
	if spec.Gateway == "" {
		pool.Gateway = p.Addr().Next()
	} else {
		gw, err := netip.ParseAddr(spec.Gateway)
		if err != nil {
			return Pool{}, fieldErr("gateway", "%q is not an IP address", spec.Gateway)
		}
		if err := sameFamily("gateway", gw, p); err != nil {
			return Pool{}, err
		}
		if !p.Contains(gw) || gw == p.Addr() || (gw.Is4() && gw == last(p)) {
			return Pool{}, fieldErr("gateway", "%s is not a usable address of %s", gw, p)
		}
		pool.Gateway = gw
	}
	for i, r := range spec.Ranges {
		f := fmt.Sprintf("ranges[%d]", i)
		s, err1 := netip.ParseAddr(r[0])
		e, err2 := netip.ParseAddr(r[1])
		if err1 != nil || err2 != nil {
			return Pool{}, fieldErr(f, "%q-%q is not a range of IP addresses", r[0], r[1])
		}
		for _, a := range []netip.Addr{s, e} {
			if err := sameFamily(f, a, p); err != nil {
				return Pool{}, err
			}
		}
		if !p.Contains(s) || !p.Contains(e) {
			return Pool{}, fieldErr(f, "%s-%s is not inside %s", s, e, p)
		}
		if s.Compare(e) > 0 {
			return Pool{}, fieldErr(f, "start %s is after end %s", s, e)
		}
		pool.Ranges = append(pool.Ranges, Range{s, e})
	}
	if len(pool.Ranges) == 0 {
		pool.Ranges = []Range{{p.Addr(), last(p)}}
	}
	for i, x := range spec.Exclusions {
		f := fmt.Sprintf("exclusions[%d]", i)
		var xp netip.Prefix
		if strings.Contains(x, "/") {
			xp, err = netip.ParsePrefix(x)
			if err == nil {
				xp = xp.Masked()
			}
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(x)
			if err == nil {
				xp = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return Pool{}, fieldErr(f, "%q is not an IP address or CIDR", x)
		}
		if err := sameFamily(f, xp.Addr(), p); err != nil {
			return Pool{}, err
		}
		if !p.Overlaps(xp) {
			return Pool{}, fieldErr(f, "%s is not inside %s", xp, p)
		}
		pool.Exclusions = append(pool.Exclusions, xp)
	}
	return pool, nil
}

func maxBits(a netip.Addr) int {
	if a.Is4() {
		return maxBitsV4
	}
	return maxBitsV6
}

// last returns the last address of p.
func last(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Allocatable reports whether a may be given to an endpoint: inside a range,
// not the gateway, not excluded, and not the network or (IPv4) broadcast
// address. The reason is empty when it may.
func (p Pool) Allocatable(a netip.Addr) (bool, string) {
	switch {
	case !p.Prefix.Contains(a):
		return false, fmt.Sprintf("%s is not inside %s", a, p.Prefix)
	case a == p.Prefix.Addr():
		return false, fmt.Sprintf("%s is the network address of %s", a, p.Prefix)
	case a.Is4() && a == last(p.Prefix):
		return false, fmt.Sprintf("%s is the broadcast address of %s", a, p.Prefix)
	case a == p.Gateway:
		return false, fmt.Sprintf("%s is the gateway of %s", a, p.Prefix)
	}
	for _, x := range p.Exclusions {
		if x.Contains(a) {
			return false, fmt.Sprintf("%s is excluded (%s)", a, x)
		}
	}
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s is outside the allocation ranges", a)
}

// Size is the number of addresses in the pool's ranges (before exclusions),
// saturated at 1<<62.
func (p Pool) Size() uint64 {
	var n big.Int
	for _, r := range p.Ranges {
		s := new(big.Int).SetBytes(r.Start.AsSlice())
		e := new(big.Int).SetBytes(r.End.AsSlice())
		n.Add(&n, e.Sub(e, s).Add(e, big.NewInt(1)))
	}
	if !n.IsUint64() || n.Uint64() > 1<<62 {
		return 1 << 62
	}
	return n.Uint64()
}

// scanLimit bounds one linear search: past it, Next gives up and reports
// the pool as full. Subnets larger than this (IPv6) are searched from a
// start point chosen by the caller, so collisions stay rare.
const scanLimit = 1 << 20

// Next returns the first allocatable address at or after start (wrapping
// around the ranges once) for which taken is false.
func (p Pool) Next(start netip.Addr, taken func(netip.Addr) bool) (netip.Addr, bool) {
	if !p.Prefix.Contains(start) {
		start = p.Ranges[0].Start
	}
	a := start
	for i := 0; i < scanLimit; i++ {
		if ok, _ := p.Allocatable(a); ok && !taken(a) {
			return a, true
		}
		a = p.step(a)
		if a == start {
			break
		}
	}
	return netip.Addr{}, false
}

// step returns the address after a inside the pool's ranges, wrapping.
func (p Pool) step(a netip.Addr) netip.Addr {
	n := a.Next()
	for _, r := range p.Ranges {
		if r.Contains(n) {
			return n
		}
	}
	// Jump to the next range that starts after a, or wrap to the first.
	var best netip.Addr
	for _, r := range p.Ranges {
		if r.Start.Compare(a) > 0 && (!best.IsValid() || r.Start.Compare(best) < 0) {
			best = r.Start
		}
	}
	if best.IsValid() {
		return best
	}
	first := p.Ranges[0].Start
	for _, r := range p.Ranges {
		if r.Start.Compare(first) < 0 {
			first = r.Start
		}
	}
	return first
}

// Offset returns the address seed positions into the pool's first range,
// modulo its size: a way to spread concurrent allocators over a subnet.
func (p Pool) Offset(seed uint64) netip.Addr {
	r := p.Ranges[0]
	s := new(big.Int).SetBytes(r.Start.AsSlice())
	size := new(big.Int).SetBytes(r.End.AsSlice())
	size.Sub(size, s).Add(size, big.NewInt(1))
	off := new(big.Int).Mod(new(big.Int).SetUint64(seed), size)
	s.Add(s, off)
	b := s.FillBytes(make([]byte, r.Start.BitLen()/8))
	a, _ := netip.AddrFromSlice(b)
	return a
}

// MAC derives the MAC address of endpoint name on network: locally
// administered, unicast, stable for the same inputs. attempt > 0 gives
// another address for the same inputs, for collisions.
func MAC(network, name string, attempt int) string {
	h := sha256.New()
	h.Write([]byte(network))
	h.Write([]byte{0})
	h.Write([]byte(name))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(attempt))
	h.Write(n[:])
	sum := h.Sum(nil)
	mac := net.HardwareAddr(sum[:6])
	mac[0] = (mac[0] &^ 0x01) | 0x02
	return mac.String()
}

// ParseMAC validates a user-given MAC: a unicast, non-zero 48-bit address.
// It returns the canonical form.
func ParseMAC(s string) (string, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", fieldErr("mac", "%q is not a 48-bit MAC address", s)
	}
	if hw[0]&0x01 != 0 {
		return "", fieldErr("mac", "%s is a multicast address", hw)
	}
	if hw.String() == "00:00:00:00:00:00" {
		return "", fieldErr("mac", "the all-zero address is not allowed")
	}
	return hw.String(), nil
}
