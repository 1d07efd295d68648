package flower

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

func policyRules() []PolicyRule {
	est := PolicyMatch{EthType: EthIPv4, CtState: CtTracked | CtEstablished, CtStateMask: CtTracked | CtEstablished}
	allow := PolicyMatch{EthType: EthIPv4, IPProto: unix.IPPROTO_TCP, Src: netip.MustParsePrefix("198.51.100.8/29"),
		Dst: netip.MustParsePrefix("198.51.100.20/32"), DstPortMin: 8000, DstPortMax: 8099,
		CtState: CtTracked | CtNew, CtStateMask: CtTracked | CtNew | CtInvalid}
	return []PolicyRule{
		{Dev: "va", Index: 3, Chain: 0, Prio: 1, Match: PolicyMatch{EthType: EthIPv4},
			Actions: []PolicyAction{{Kind: PolicyCt, Zone: 1}, {Kind: PolicyGoto, Chain: 1}}},
		{Dev: "va", Index: 3, Chain: 0, Prio: 2, Match: PolicyMatch{EthType: EthARP}, Actions: []PolicyAction{{Kind: PolicyGoto, Chain: 2}}},
		{Dev: "va", Index: 3, Chain: 1, Prio: 1, Match: est, Actions: []PolicyAction{{Kind: PolicyGoto, Chain: 2}}},
		{Dev: "va", Index: 3, Chain: 1, Prio: 2, Match: allow, Actions: []PolicyAction{{Kind: PolicyCt, Zone: 1, Commit: true}, {Kind: PolicyGoto, Chain: 2}}},
		{Dev: "va", Index: 3, Chain: 1, Prio: 3, Match: PolicyMatch{EthType: EthIPv4, IPProto: unix.IPPROTO_UDP, DstPortMin: 53, DstPortMax: 53}, Actions: []PolicyAction{{Kind: PolicyPass}}},
		{Dev: "va", Index: 3, Chain: 1, Prio: 4, Match: PolicyMatch{EthType: EthIPv4}, Actions: []PolicyAction{{Kind: PolicyDrop}}},
		{Dev: "va", Index: 3, Chain: 1, Prio: 5, Match: PolicyMatch{EthType: EthIPv6, DstMAC: "02:73:6b:00:00:64"}, Actions: []PolicyAction{{Kind: PolicyGoto, Chain: 2}}},
		{Dev: "va", Index: 3, Chain: 2, Prio: 1, Match: PolicyMatch{EthType: EthIPv4, IPProto: unix.IPPROTO_SCTP, DstPortMin: 9}, Actions: []PolicyAction{{Kind: PolicyContinue}}},
		{Dev: "va", Index: 3, Chain: 2, Prio: 2, Match: PolicyMatch{EthType: EthIPv4}, Actions: []PolicyAction{{Kind: PolicyRedirect, Index: 4}}},
	}
}

// Every rule comes back from its own encoding as it went in, cookie
// included.
func TestPolicyRoundTrip(t *testing.T) {
	for _, r := range policyRules() {
		if r.Match.DstPortMin == 9 { // one port given as min only: not a range
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "DstPortMin/Max") {
				t.Errorf("%s: Validate = %v, want a DstPortMin/Max error", r, err)
			}
			continue
		}
		b, err := EncodePolicy(r, 7, flagSkipHW)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		f, ok, err := DecodePolicy(b)
		if err != nil || !ok {
			t.Fatalf("%s: decode: ok=%v err=%v", r, ok, err)
		}
		if f.Rule.String() != r.String() || f.Rule.Index != r.Index || f.Handle != 7 || f.Flags != flagSkipHW {
			t.Errorf("decoded %s (index %d handle %d flags %d), want %s (index %d)", f.Rule, f.Rule.Index, f.Handle, f.Flags, r, r.Index)
		}
		if !f.Skiff() || string(f.Cookie) != string(PolicyCookie(r)) {
			t.Errorf("%s: cookie %x, want %x", r, f.Cookie, PolicyCookie(r))
		}
	}
}

// A rule matching the packet's mark is a fw filter whose handle is the
// mark (whatever handle it is given), never asked of the hardware; it
// decodes back as the same rule, and its delete names fw.
func TestPolicyMarkRoundTrip(t *testing.T) {
	r := PolicyRule{Dev: "skh100", Index: 5, Chain: ChainEntry, Prio: PrioEntryReply, Match: PolicyMatch{EthType: EthAll, Mark: ReplyMark},
		Actions: []PolicyAction{{Kind: PolicyGoto, Chain: ChainForward}}}
	b, err := EncodePolicy(r, 7, flagSkipHW)
	if err != nil {
		t.Fatal(err)
	}
	f, ok, err := DecodePolicy(b)
	if err != nil || !ok {
		t.Fatalf("decode: ok=%v err=%v", ok, err)
	}
	if f.Rule.String() != r.String() || f.Handle != ReplyMark || f.Flags != 0 || string(f.Cookie) != string(PolicyCookie(r)) {
		t.Errorf("decoded %s (handle %#x flags %d cookie %x), want %s at handle %#x", f.Rule, f.Handle, f.Flags, f.Cookie, r, ReplyMark)
	}
	if d := deleteFilter(f); d.Kind != tc.KindFw || d.Handle != ReplyMark {
		t.Errorf("delete of %s: kind %q handle %#x, want fw at %#x", r, d.Kind, d.Handle, ReplyMark)
	}
}

func TestPolicyStrings(t *testing.T) {
	rs := policyRules()
	for i, want := range map[int]string{
		0: "chain 0 prio 1 ip: ct zone 1, goto chain 1",
		3: "chain 1 prio 2 ip ip_proto 6 src 198.51.100.8/29 dst 198.51.100.20/32 dst_port 8000-8099 ct_state +trk+new-inv: ct commit zone 1, goto chain 2",
		2: "chain 1 prio 1 ip ct_state +trk+est: goto chain 2",
	} {
		if got := rs[i].String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	if PolicyCookie(rs[0])[0] != 's' || string(PolicyCookie(rs[0])) == string(PolicyCookie(rs[1])) {
		t.Error("cookies of different rules are equal or not Skiff's")
	}
}

// Validate names the field the kernel would refuse.
func TestPolicyValidate(t *testing.T) {
	ok := PolicyRule{Dev: "va", Index: 3, Prio: 1, Match: PolicyMatch{EthType: EthIPv4}, Actions: []PolicyAction{{Kind: PolicyDrop}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, mod := range map[string]func(r *PolicyRule){
		"index":                               func(r *PolicyRule) { r.Index = 0 },
		"prio: 0":                             func(r *PolicyRule) { r.Prio = 0 },
		"prio 0x5300":                         func(r *PolicyRule) { r.Prio = PrioARP },
		"match.EthType:":                      func(r *PolicyRule) { r.Match.EthType = 0 },
		"match.DstMAC \"02:73:6B:00:00:64\"":  func(r *PolicyRule) { r.Match.DstMAC = "02:73:6B:00:00:64" },
		"match.DstMAC \"02:73\"":              func(r *PolicyRule) { r.Match.DstMAC = "02:73" },
		"match.EthType 0x0806":                func(r *PolicyRule) { r.Match.EthType, r.Match.IPProto = EthARP, 6 },
		"Src/Dst: prefixes of another family": func(r *PolicyRule) { r.Match.Src = netip.MustParsePrefix("2001:db8::/64") },
		"match.ICMPType 135":                  func(r *PolicyRule) { r.Match.ICMPType = 135 },
		"match.IPProto 1":                     func(r *PolicyRule) { r.Match.IPProto, r.Match.DstPortMin, r.Match.DstPortMax = 1, 80, 80 },
		"DstPortMin/Max":                      func(r *PolicyRule) { r.Match.IPProto, r.Match.DstPortMin, r.Match.DstPortMax = 6, 90, 80 },
		"outside the mask":                    func(r *PolicyRule) { r.Match.CtState, r.Match.CtStateMask = CtTracked|CtNew, CtTracked },
		"without +trk":                        func(r *PolicyRule) { r.Match.CtState, r.Match.CtStateMask = CtNew, CtTracked|CtNew },
		"exclude each other":                  func(r *PolicyRule) { r.Match.CtState, r.Match.CtStateMask = ctAll&^CtInvalid, ctAll },
		"actions: none":                       func(r *PolicyRule) { r.Actions = nil },
		"match.Mark: matched alone":           func(r *PolicyRule) { r.Match.Mark = ReplyMark },
		"actions[0].Chain 0":                  func(r *PolicyRule) { r.Actions = []PolicyAction{{Kind: PolicyGoto}} },
		"actions[0].Index":                    func(r *PolicyRule) { r.Actions = []PolicyAction{{Kind: PolicyRedirect}} },
		"actions[1].Kind":                     func(r *PolicyRule) { r.Actions = append(r.Actions, PolicyAction{Kind: "accept"}) },
	} {
		r := ok
		r.Actions = append([]PolicyAction(nil), ok.Actions...)
		mod(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate = %v, want an error naming %q", field, err, field)
		}
		if _, err := EncodePolicy(r, 0, 0); err == nil {
			t.Errorf("%s: EncodePolicy accepted an invalid rule", field)
		}
	}
}
