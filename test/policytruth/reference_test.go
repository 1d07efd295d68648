package policytruth

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func layoutWithIPs() []*Pod {
	pods := Layout()
	for i, p := range pods {
		p.IP = fmt.Sprintf("198.51.100.%d", 10+i)
	}
	return pods
}

// layoutWithIPv6 is the layout of an IPv6 pass, addresses from Subnet6.
func layoutWithIPv6() []*Pod {
	pods := Layout()
	for i, p := range pods {
		p.IP = fmt.Sprintf("2001:db8:100::%x", 10+i)
	}
	return pods
}

func pod(pods []*Pod, name string) *Pod {
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	panic(name)
}

// TestCasesRender: every case decodes strictly, changes the open matrix
// unless marked Open, in an IPv4 and an IPv6 pass (which renders no IPv4
// address), and the suite has enough policies.
func TestCasesRender(t *testing.T) {
	for _, pods := range [][]*Pod{layoutWithIPs(), layoutWithIPv6()} {
		n := 0
		for _, probes := range [][]Probe{Probes, slices.Concat(Probes, SCTPProbes)} {
			open := Expected(nil, pods, probes)
			for k, v := range open {
				if !v {
					t.Fatalf("open matrix denies %s", k)
				}
			}
			n = 0
			for _, c := range Cases {
				doc, pols, err := c.Render(pods)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(pods[0].IP, ":") && (strings.Contains(doc, "198.51.100") || strings.Contains(doc, "0.0.0.0") || strings.Contains(doc, "/32")) {
					t.Errorf("%s: the IPv6 pass renders an IPv4 address or length:\n%s", c.Name, doc)
				}
				n += len(pols)
				if changed := !maps.Equal(Expected(pols, pods, probes), open); changed == c.Open {
					t.Errorf("%s (pods %s...): changes the open matrix on %v: %v, marked open: %v", c.Name, pods[0].IP, probes, changed, c.Open)
				}
			}
		}
		if n < MinPolicies {
			t.Errorf("%d policies, want at least %d", n, MinPolicies)
		}
	}
	pods := layoutWithIPs()
	if _, _, err := (Case{Name: "bad", YAML: "metadata: {name: x}\nspec: {podSelector: {}, bogus: 1}"}).Render(pods); err == nil {
		t.Error("an unknown field decodes")
	}
	if _, _, err := (Case{Name: "bad", YAML: "kind: NetworkPolicy\nspec: {ingress: [{from: [{ipBlock: {cidr: '{{nobody}}/32'}}]}]}"}).Render(pods); err == nil {
		t.Error("a placeholder naming no pod renders")
	}
}

// TestReference pins the reading of the rules on a few probes of the
// cases, worked out by hand from the Kubernetes documentation.
func TestReference(t *testing.T) {
	pods := layoutWithIPs()
	cases := map[string]Case{}
	for _, c := range Cases {
		cases[c.Name] = c
	}
	for _, x := range []struct {
		cas, src, dst string
		pr            Probe
		want          bool
	}{
		{"deny all ingress in a namespace", "api", "web1", Probe{"TCP", 80}, false},
		{"deny all ingress in a namespace", "web1", "api", Probe{"TCP", 80}, true},
		{"deny all egress in a namespace", "client", "web1", Probe{"ICMP", 0}, false},
		{"deny all egress in a namespace", "web1", "client", Probe{"ICMP", 0}, true},
		{"podSelector AND namespaceSelector in one peer", "web2", "db1", Probe{"TCP", 80}, true},
		{"podSelector AND namespaceSelector in one peer", "client", "db1", Probe{"TCP", 80}, false},
		{"podSelector AND namespaceSelector in one peer", "web1", "db1", Probe{"TCP", 80}, false},
		{"podSelector OR namespaceSelector as two peers", "client", "db1", Probe{"TCP", 80}, true},
		{"podSelector OR namespaceSelector as two peers", "web1", "db1", Probe{"TCP", 80}, true},
		{"podSelector OR namespaceSelector as two peers", "web2", "db1", Probe{"TCP", 80}, true},
		{"podSelector OR namespaceSelector as two peers", "api", "db1", Probe{"TCP", 80}, false},
		{"ipBlock with except", "client", "db1", Probe{"UDP", 53}, false},
		{"ipBlock with except", "web2", "db1", Probe{"UDP", 53}, true},
		{"port range with endPort", "web1", "db2", Probe{"TCP", 8080}, true},
		{"port range with endPort", "web1", "db2", Probe{"TCP", 443}, false},
		{"egress deny with DNS allowed", "client", "db1", Probe{"TCP", 53}, true},
		{"egress deny with DNS allowed", "client", "db1", Probe{"UDP", 5353}, false},
		{"port without protocol is TCP", "web1", "db2", Probe{"TCP", 443}, true},
		{"port without protocol is TCP", "web1", "db2", Probe{"ICMP", 0}, false},
		{"protocol without port is every port", "web1", "db2", Probe{"UDP", 5353}, true},
		{"matchExpressions NotIn and DoesNotExist", "client", "db1", Probe{"TCP", 80}, true},
		{"matchExpressions NotIn and DoesNotExist", "web2", "db1", Probe{"TCP", 80}, false},
		{"matchExpressions NotIn and DoesNotExist", "api", "db1", Probe{"TCP", 80}, false}, // prod has team
		{"egress rules without policyTypes isolate both ways", "web1", "api", Probe{"TCP", 80}, false},
		{"egress rules without policyTypes isolate both ways", "db2", "api", Probe{"TCP", 80}, false}, // ingress isolated too
		{"egress rules without policyTypes isolate both ways", "web1", "client", Probe{"TCP", 80}, true},
		{"egress rules without policyTypes isolate both ways", "api", "web1", Probe{"TCP", 80}, false},
		{"range edges", "web1", "db1", Probe{"TCP", 80}, true},
		{"range edges", "web1", "db1", Probe{"TCP", 443}, false},
		{"range edges", "web1", "db1", Probe{"TCP", 8080}, true},
		{"egress allowed by one side, ingress denied by the other", "client", "db1", Probe{"TCP", 80}, false},
		{"egress allowed by one side, ingress denied by the other", "client", "db2", Probe{"TCP", 80}, true},
		// SCTP: an entry with protocol SCTP matches SCTP only; an entry
		// without a protocol is TCP; no ports is every protocol.
		{"deny all ingress in a namespace", "api", "web1", Probe{"SCTP", 80}, false},
		{"deny all ingress in a namespace", "web1", "api", Probe{"SCTP", 80}, true},
		{"allow only the same namespace", "db2", "api", Probe{"SCTP", 80}, true}, // a rule without ports
		{"allow only the same namespace", "web1", "api", Probe{"SCTP", 80}, false},
		{"port range with endPort", "web1", "db2", Probe{"SCTP", 80}, false}, // TCP 8000-8100
		{"egress deny with DNS allowed", "client", "db1", Probe{"SCTP", 80}, false},
		{"two policies on one pod are a union", "web1", "db1", Probe{"TCP", 80}, true},
		{"two policies on one pod are a union", "web1", "db1", Probe{"SCTP", 80}, false}, // {port: 80} is TCP
		{"egress only to db on TCP 80", "web1", "db1", Probe{"SCTP", 80}, false},
		{"UDP only", "web1", "db1", Probe{"SCTP", 80}, false},
		{"port without protocol is TCP", "web1", "db2", Probe{"SCTP", 80}, false},
		{"protocol without port is every port", "web1", "db2", Probe{"SCTP", 80}, true}, // {protocol: SCTP}
		{"protocol without port is every port", "web1", "db2", Probe{"TCP", 80}, false},
		{"protocol without port is every port", "web1", "db1", Probe{"SCTP", 80}, true}, // db1 is in default
		{"range edges", "web1", "db1", Probe{"SCTP", 80}, true},
		{"range edges", "web1", "db2", Probe{"SCTP", 80}, true}, // db2 is in prod
		{"ingress and egress rules on one pod", "api", "db2", Probe{"TCP", 80}, true},
		{"ingress and egress rules on one pod", "api", "db2", Probe{"SCTP", 80}, false},
	} {
		c, ok := cases[x.cas]
		if !ok {
			t.Fatalf("no case %q", x.cas)
		}
		_, pols, err := c.Render(pods)
		if err != nil {
			t.Fatal(err)
		}
		if got := Allows(pols, pod(pods, x.src), pod(pods, x.dst), x.pr); got != x.want {
			t.Errorf("%s: %s -> %s %v: %v, want %v", x.cas, x.src, x.dst, x.pr, got, x.want)
		}
	}
}

// TestSCTPExercised: every SCTP probe meets, in some case, an allow where
// TCP on its port is denied and a deny where TCP is allowed, so that a
// datapath taking SCTP for TCP or ignoring SCTP rules fails the table.
func TestSCTPExercised(t *testing.T) {
	pods := layoutWithIPs()
	for _, pr := range SCTPProbes {
		tcp := Probe{"TCP", pr.Port}
		if !slices.Contains(Probes, tcp) {
			t.Errorf("%v: no TCP probe on its port", pr)
		}
		var allowed, denied string
		for _, c := range Cases {
			_, pols, err := c.Render(pods)
			if err != nil {
				t.Fatal(err)
			}
			for _, src := range pods {
				for _, dst := range pods {
					if src == dst {
						continue
					}
					s, tc := Allows(pols, src, dst, pr), Allows(pols, src, dst, tcp)
					if s && !tc && allowed == "" {
						allowed = c.Name + ": " + Key(src, dst, pr)
					}
					if !s && tc && denied == "" {
						denied = c.Name + ": " + Key(src, dst, pr)
					}
				}
			}
		}
		if allowed == "" || denied == "" {
			t.Errorf("%v: allowed where TCP is denied in %q, denied where TCP is allowed in %q: want both", pr, allowed, denied)
		}
		t.Logf("%v: allowed where TCP is denied in %s; denied where TCP is allowed in %s", pr, allowed, denied)
	}
}

func TestChecksum(t *testing.T) {
	// An echo request with identifier 1, sequence 1 and no data.
	if got := checksum([]byte{8, 0, 0, 0, 0, 1, 0, 1}); got != 0xf7fd {
		t.Errorf("checksum %#x, want 0xf7fd", got)
	}
}
