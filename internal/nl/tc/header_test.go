package tc

import (
	"regexp"
	"strconv"
	"strings"
)

// headerValues are the numbers a C header defines: enum members and
// object-like #defines whose values are constant expressions.
type headerValues map[string]int64

var (
	comments = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	enums    = regexp.MustCompile(`(?s)enum\s*\w*\s*\{(.*?)\}`)
	defines  = regexp.MustCompile(`(?m)^#define\s+(\w+)[ \t]+([^\n]+)$`)
)

func (h headerValues) parse(src string) {
	src = comments.ReplaceAllString(src, "")
	for _, m := range enums.FindAllStringSubmatch(src, -1) {
		next := int64(0)
		for _, item := range strings.Split(m[1], ",") {
			name, expr, has := strings.Cut(strings.TrimSpace(item), "=")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if has {
				v, ok := h.eval(expr)
				if !ok {
					continue
				}
				next = v
			}
			h[name] = next
			next++
		}
	}
	for _, m := range defines.FindAllStringSubmatch(src, -1) {
		if v, ok := h.eval(m[2]); ok {
			h[m[1]] = v
		}
	}
}

// eval evaluates a C constant expression of numbers (with U suffixes),
// names already known, parentheses, unary minus, +, -, << and |, and
// __TC_ACT_EXT(x).
func (h headerValues) eval(s string) (int64, bool) {
	p := &exprParser{toks: tokens(s), h: h}
	v := p.or()
	return v, p.ok && p.i == len(p.toks)
}

var token = regexp.MustCompile(`0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|\w+|<<|[()|+\-]|\S`)

func tokens(s string) []string { return token.FindAllString(s, -1) }

type exprParser struct {
	toks []string
	i    int
	h    headerValues
	ok   bool
}

func (p *exprParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *exprParser) or() int64 {
	p.ok = true
	v := p.shift()
	for p.peek() == "|" {
		p.i++
		v |= p.shift()
	}
	return v
}

func (p *exprParser) shift() int64 {
	v := p.sum()
	for p.peek() == "<<" {
		p.i++
		v <<= p.sum()
	}
	return v
}

func (p *exprParser) sum() int64 {
	v := p.unary()
	for p.peek() == "+" || p.peek() == "-" {
		op := p.peek()
		p.i++
		if op == "+" {
			v += p.unary()
		} else {
			v -= p.unary()
		}
	}
	return v
}

func (p *exprParser) unary() int64 {
	if p.peek() == "-" {
		p.i++
		return -p.unary()
	}
	return p.primary()
}

func (p *exprParser) primary() int64 {
	t := p.peek()
	p.i++
	switch {
	case t == "(":
		ok := p.ok
		v := p.or()
		p.ok = p.ok && ok
		if p.peek() != ")" {
			p.ok = false
		}
		p.i++
		return v
	case t == "__TC_ACT_EXT" && p.peek() == "(":
		return p.primary() << p.h["__TC_ACT_EXT_SHIFT"]
	case t != "" && t[0] >= '0' && t[0] <= '9':
		v, err := strconv.ParseInt(strings.TrimRight(t, "uUlL"), 0, 64)
		if err != nil {
			p.ok = false
		}
		return v
	default:
		v, known := p.h[t]
		if !known {
			p.ok = false
		}
		return v
	}
}
