package nltest

import (
	"cmp"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Expect is a namespace's State as the fake prints it, from an
// expectation written in pieces (each piece one or more lines of State,
// in any order between pieces), so that a state-transition table can
// name the parts of a node (a network's links, its rules, someone
// else's objects) and put them together per step:
//
//	want := nltest.Expect(foreign, blueLinks, blueFilters, "sysctl net/ipv4/ip_forward = 1")
//	if got := w.NS("").State(); got != want { ... }
//
// Lines are put in State's order: links by name; addresses, bridge
// VLANs, FDB entries and neighbours by link name, then address, VID,
// entry or IP; routes, rules
// and sysctls as written (State's order: routes by table then
// destination, rules by priority, sysctls the namespace's then the
// links'); tables by name, each with the indented lines under it; each
// link's qdisc then its filters, by link name, the filters ingress first,
// by chain, priority and handle (the kernel's dump order);
// devlink devices; VFs by PF, as written. Blank lines are left out.
func Expect(parts ...string) string {
	type line struct {
		kind int
		link string // the link (or table, device) the line is of
		key  string // what orders lines of one kind and link
		text string
	}
	kinds := []string{"link ", "addr ", "fdb ", "neigh ", "route ", "rule ", "sysctl ", "table ", "qdisc ", "devlink ", "vf ", "vlan "}
	const vlans = 11 // between addr and fdb lines, as State prints them
	rank := func(k int) int {
		if k == vlans {
			return 15
		}
		return 10 * k
	}
	const filters = 8 // "filter " lines go with their link's qdisc
	var ls []line
	for _, p := range parts {
		for _, s := range strings.Split(p, "\n") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			if strings.HasPrefix(s, " ") && len(ls) > 0 && ls[len(ls)-1].kind == 7 {
				ls[len(ls)-1].text += "\n" + s
				continue
			}
			k := slices.IndexFunc(kinds, func(k string) bool { return strings.HasPrefix(s, k) })
			if strings.HasPrefix(s, "filter ") {
				k = filters
			}
			f := strings.Fields(s)
			l := line{kind: k, text: s}
			if len(f) > 1 {
				l.link = f[1]
			}
			if k == 7 && len(f) > 2 {
				l.link = f[2] // table inet NAME
			}
			if len(f) > 2 {
				l.key = f[2]
			}
			ls = append(ls, l)
		}
	}
	addrOf := func(s string) netip.Addr {
		if p, err := netip.ParsePrefix(s); err == nil {
			return p.Addr()
		}
		a, _ := netip.ParseAddr(s)
		return a
	}
	bits := func(s string) int {
		p, _ := netip.ParsePrefix(s)
		return p.Bits()
	}
	slices.SortStableFunc(ls, func(a, b line) int {
		if c := cmp.Compare(rank(a.kind), rank(b.kind)); c != 0 {
			return c
		}
		switch a.kind {
		case filters: // a link's qdisc first, then its filters
			return cmp.Or(cmp.Compare(a.link, b.link), slices.Compare(filterPlace(a.text), filterPlace(b.text)))
		case 0, 7, 10:
			return cmp.Compare(a.link, b.link)
		case 1:
			return cmp.Or(cmp.Compare(a.link, b.link), addrOf(a.key).Compare(addrOf(b.key)), cmp.Compare(bits(a.key), bits(b.key)))
		case 2, 9:
			return cmp.Or(cmp.Compare(a.link, b.link), cmp.Compare(a.text, b.text))
		case 3:
			return cmp.Or(cmp.Compare(a.link, b.link), addrOf(a.key).Compare(addrOf(b.key)))
		case vlans:
			vid := func(s string) int { n, _ := strconv.Atoi(s); return n }
			return cmp.Or(cmp.Compare(a.link, b.link), cmp.Compare(vid(a.key), vid(b.key)))
		}
		return 0 // as written
	})
	if len(ls) == 0 {
		return ""
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// filterPlace orders a link's qdisc and filters as State does: the
// qdisc, then ingress before egress, by chain, priority and handle (the
// kernel's dump order within a chain).
func filterPlace(line string) []uint64 {
	f := strings.Fields(line)
	if f[0] == "qdisc" {
		return nil
	}
	place := []uint64{0, 0, 0, 0}
	if len(f) > 2 && f[2] == "egress" {
		place[0] = 1
	}
	for i := 3; i+1 < len(f); i++ {
		for j, k := range []string{"chain", "prio", "handle"} {
			if f[i] == k {
				place[j+1], _ = strconv.ParseUint(f[i+1], 0, 32)
			}
		}
		if f[i] == "handle" {
			break // what follows is the filter's own
		}
	}
	return place
}

var cookieRE = regexp.MustCompile(`cookie ([0-9a-f]{8})[0-9a-f]+`)

// ShortCookies cuts every tc action cookie of a State text to its first
// four bytes, followed by "…". Skiff's cookies are a marker and two bytes
// of flags and errno, then a digest of the rule the line shows: the
// digest is the datapath's way of recognising its filters (what a
// second Apply writing nothing proves right), not something a reader of
// an expectation can check by eye.
func ShortCookies(state string) string {
	return cookieRE.ReplaceAllString(state, "cookie $1…")
}

// Diff is a line diff of two State texts for a test's failure: the
// lines only want has ("- "), and those only got has ("+ "), in order,
// each change with the line before it for context ("  "); "" when they
// are equal.
func Diff(want, got string) string {
	if want == got {
		return ""
	}
	a, b := strings.Split(strings.TrimSuffix(want, "\n"), "\n"), strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	// The longest common subsequence, by lengths from the ends.
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	prev, inChange := "", false // the last common line; whether a change is being listed
	change := func(s string) {
		if !inChange && prev != "" {
			out = append(out, "  "+prev)
		}
		out, inChange = append(out, s), true
	}
	for i, j := 0, 0; i < len(a) || j < len(b); {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			prev, inChange = a[i], false
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			change("- " + a[i])
			i++
		default:
			change("+ " + b[j])
			j++
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// Mismatch is "" when a State text is the one wanted, else what a test
// reports: the diff (Diff), then the whole text held, from which an
// expectation is read.
func Mismatch(want, got string) string {
	if want == got {
		return ""
	}
	return "differs from the expectation (- wanted, + held):\n" + Diff(want, got) + "holds:\n" + got
}

// Filter is a flower filter's State line on dev's ingress, for an
// expectation: at is "CHAIN PRIO PROTOCOL HANDLE" (PRIO in decimal,
// HANDLE in hex, as State prints them), flags flower's ("skip_sw in_hw",
// "not_in_hw"), match its keys ("" for none) and actions as State prints
// them; the first action carries cookie (hex, or as ShortCookies leaves
// it; "" for none).
func Filter(dev, at, flags, match, cookie string, actions ...string) string {
	f := strings.Fields(at)
	if len(f) != 4 {
		panic("nltest: a filter's place is CHAIN PRIO PROTOCOL HANDLE, not " + at)
	}
	s := "filter " + dev + " ingress chain " + f[0] + " prio " + f[1] + " protocol " + f[2] + " handle " + f[3] + " flower " + flags
	if match != "" {
		s += " " + match
	}
	for i, a := range actions {
		s += " action " + a
		if i == 0 && cookie != "" {
			s += " cookie " + cookie
		}
	}
	return s
}
