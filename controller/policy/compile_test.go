package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var endpoints = []Endpoint{
	{Name: "web-1", Node: "n1", Namespace: "shop", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.11")}},
	{Name: "web-2", Node: "n2", Namespace: "shop", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.12")}},
	{Name: "db-1", Node: "n2", Namespace: "shop", Labels: map[string]string{"app": "db"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.21")}},
	{Name: "mon-1", Node: "n3", Namespace: "ops", Labels: map[string]string{"app": "mon"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.31")}},
	{Name: "web-ops", Node: "n3", Namespace: "ops", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.41")}},
	{Name: "vm-1", Node: "n1", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{netip.MustParseAddr("198.51.100.51")}},
}

var namespaces = map[string]map[string]string{"shop": {"team": "shop"}, "ops": {"team": "ops", "monitoring": "yes"}}

// render prints a result compactly: per selected endpoint its isolation and
// rules with group members spelled out, sorted.
func render(r Result) string {
	var out []string
	for name, er := range r.Endpoints {
		line := fmt.Sprintf("%s in=%v out=%v", name, er.IngressIsolated, er.EgressIsolated)
		for _, d := range []struct {
			dir   string
			rules []Rule
		}{{"ingress", er.Ingress}, {"egress", er.Egress}} {
			dir, rules := d.dir, d.rules
			for _, rule := range rules {
				var peers []string
				for _, p := range rule.Peers {
					if p.Group != "" {
						peers = append(peers, fmt.Sprint(r.Groups[p.Group].Members))
					} else {
						peers = append(peers, fmt.Sprintf("%s-%v", p.CIDR, p.Except))
					}
				}
				if len(peers) == 0 {
					peers = []string{"any"}
				}
				ports := []string{}
				for _, p := range rule.Ports {
					ports = append(ports, fmt.Sprintf("%s/%d-%d", p.Protocol, p.Port, p.EndPort))
				}
				if len(ports) == 0 {
					ports = []string{"all"}
				}
				line += fmt.Sprintf(" %s(%s:%s)", dir, strings.Join(peers, "|"), strings.Join(ports, ","))
			}
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func compileYAML(t *testing.T, y string) (Result, error) {
	t.Helper()
	pols, err := ParseYAML([]byte(y))
	if err != nil {
		return Result{}, err
	}
	return Compile(pols, endpoints, namespaces)
}

func TestSemantics(t *testing.T) {
	const head = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  namespace: shop\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"no policy isolates nothing", "", ""},
		{"deny all ingress", head + "  name: deny\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
			"db-1 in=true out=false\nweb-1 in=true out=false\nweb-2 in=true out=false"},
		{"empty ingress list means nothing allowed", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress: []\n",
			"db-1 in=true out=false"},
		{"empty from means all peers", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress: [{}]\n",
			"db-1 in=true out=false ingress(any:all)"},
		{"podSelector peer: same namespace only", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: web}}}]\n    ports: [{port: 5432}]\n",
			"db-1 in=true out=false ingress([198.51.100.11 198.51.100.12]:TCP/5432-5432)"},
		{"namespaceSelector peer: every pod of those namespaces", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {monitoring: \"yes\"}}}]\n",
			"db-1 in=true out=false ingress([198.51.100.31 198.51.100.41]:all)"},
		{"both selectors in one peer: AND", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}]\n",
			"db-1 in=true out=false ingress([198.51.100.11 198.51.100.12 198.51.100.41]:all)"},
		{"two peers: OR", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {team: ops}}}, {podSelector: {matchLabels: {app: web}}}]\n",
			"db-1 in=true out=false ingress([198.51.100.31 198.51.100.41]|[198.51.100.11 198.51.100.12]:all)"},
		{"matchExpressions", head + "  name: x\nspec:\n  podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}\n  ingress:\n  - from: [{podSelector: {matchExpressions: [{key: app, operator: Exists}]}}]\n",
			"db-1 in=true out=false ingress([198.51.100.11 198.51.100.12 198.51.100.21]:all)"},
		{"ipBlock with except, ports with protocols and endPort", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from: [{ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.128/25]}}]\n    ports: [{protocol: UDP, port: 53}, {protocol: SCTP, port: 9000, endPort: 9010}, {protocol: TCP}]\n",
			"web-1 in=true out=false ingress(203.0.113.0/24-[203.0.113.128/25]:UDP/53-53,SCTP/9000-9010,TCP/0-0)\nweb-2 in=true out=false ingress(203.0.113.0/24-[203.0.113.128/25]:UDP/53-53,SCTP/9000-9010,TCP/0-0)"},
		{"egress section defaults policyTypes to both", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: web}}\n  egress:\n  - to: [{podSelector: {matchLabels: {app: db}}}]\n",
			"web-1 in=true out=true egress([198.51.100.21]:all)\nweb-2 in=true out=true egress([198.51.100.21]:all)"},
		{"egress only", head + "  name: x\nspec:\n  podSelector: {matchLabels: {app: db}}\n  policyTypes: [Egress]\n",
			"db-1 in=false out=true"},
		{"union of two policies", head + "  name: a\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: web}}}]\n---\n" +
			head + "  name: b\nspec:\n  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - ports: [{port: 9187}]\n",
			"db-1 in=true out=false ingress([198.51.100.11 198.51.100.12]:all) ingress(any:TCP/9187-9187)"},
		{"other namespace untouched", strings.Replace(head, "shop", "ops", 1) + "  name: x\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
			"mon-1 in=true out=false\nweb-ops in=true out=false"},
	}
	for _, tc := range tests {
		res, err := compileYAML(t, tc.yaml)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := render(res); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestBadPolicies(t *testing.T) {
	const head = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: x\nspec:\n"
	tests := []struct{ yaml, want string }{
		{head + "  podSelector: {}\n  ingress:\n  - ports: [{port: http}]\n", "spec.ingress[0].ports[0].port: \"http\": named ports are not supported"},
		{head + "  podSelector: {}\n  ingress:\n  - ports: [{protocol: ICMP, port: 1}]\n", `spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP`},
		{head + "  podSelector: {}\n  ingress:\n  - ports: [{port: 90, endPort: 80}]\n", "spec.ingress[0].ports[0].endPort: 80 must be >= port 90"},
		{head + "  podSelector: {}\n  egress:\n  - to: [{ipBlock: {cidr: 10.0.0.0/33}}]\n", `spec.egress[0].to[0].ipBlock.cidr: "10.0.0.0/33" is not a CIDR`},
		{head + "  podSelector: {}\n  egress:\n  - to: [{ipBlock: {cidr: 192.0.2.0/24, except: [198.51.100.0/24]}}]\n", "except[0]: 198.51.100.0/24 is not inside 192.0.2.0/24"},
		{head + "  podSelector: {}\n  egress:\n  - to: [{ipBlock: {cidr: 192.0.2.0/24}, podSelector: {}}]\n", "ipBlock cannot be combined"},
		{head + "  podSelector: {matchExpressions: [{key: app, operator: Sometimes}]}\n", "spec.podSelector"},
		{head + "  podSelector: {}\n  policyTypes: [Sideways]\n", `spec.policyTypes[0]: "Sideways"`},
		{head + "  podSelector: {}\n  bogus: 1\n", `unknown field "bogus"`},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "want networking.k8s.io/v1 NetworkPolicy"},
		{"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: Bad_Name}\nspec: {podSelector: {}}\n", "metadata.name"},
		{"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: ok}\nspec: {podSelector: {}}\n---\nkind: [\n", "document 2"},
	}
	for _, tc := range tests {
		_, err := ParseYAML([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestParseDefaultsAndComments(t *testing.T) {
	pols, err := ParseYAML([]byte("# policies\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a}\nspec: {podSelector: {}}\n---\n# nothing\n"))
	if err != nil || len(pols) != 1 || pols[0].Namespace != "default" {
		t.Fatalf("got %+v %v", pols, err)
	}
}

func TestGroupsAreSharedAndPruned(t *testing.T) {
	y := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  egress: [{to: [{podSelector: {matchLabels: {app: web}}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c, namespace: shop}
spec:
  podSelector: {matchLabels: {app: nothing}}
  ingress: [{from: [{podSelector: {matchLabels: {app: mon}}}]}]
`
	res, err := compileYAML(t, y)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 1 {
		t.Fatalf("want the app=web group shared by both policies and the unused one pruned, got %v", res.Groups)
	}
	if p := res.Endpoints["web-1"].Policies; fmt.Sprint(p) != "[shop/b]" {
		t.Fatalf("web-1 selected by %v", p)
	}
}
