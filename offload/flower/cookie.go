package flower

import "hash/fnv"

// Cookie is what the rule's first action carries: "sk", then a byte of
// installation flags (set by the programmer), a byte of errno, six bytes of
// a hash of MatchKey and eight of a hash of String. A rule read back from
// the kernel is recognised, and compared, by its cookie alone.
func (r Rule) Cookie() []byte { return cookie(r.MatchKey(), r.String()) }

func cookie(match, all string) []byte { return cookieOf(hash64(match), hash64(all)) }

// cookieOf is the cookie of a rule whose match key and whole rule hash
// to mk and ah.
func cookieOf(mk, ah uint64) []byte {
	c := make([]byte, cookieLen)
	copy(c, magic)
	for i := 0; i < 6; i++ {
		c[4+i] = byte(mk >> (8 * i))
		c[10+i] = byte(ah >> (8 * i))
	}
	return c
}

// hashBytes is hash64 of b, without copying it.
func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037) // FNV-1a, as hash/fnv
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
