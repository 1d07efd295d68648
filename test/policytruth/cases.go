package policytruth

// Pod is one pod of the layout. Name, Node, Namespace and Labels come
// from Layout; NetNS (the path of its network namespace) and IP are
// filled in by Env.CreatePod.
type Pod struct {
	Name, Node, Namespace string
	Labels                map[string]string
	NetNS, IP             string
}

// Namespaces are the Kubernetes namespaces of the layout and their labels
// (kubernetes.io/metadata.name is implied, as in Kubernetes).
var Namespaces = map[string]map[string]string{
	"default": {},
	"prod":    {"env": "prod", "team": "core"},
	"dev":     {"env": "dev"},
}

// Nodes are the node names Layout places pods on.
var Nodes = []string{"n1", "n2", "n3"}

// Layout returns a fresh copy of the six pods, two on each node, in the
// three namespaces. Every case's YAML is written for it.
func Layout() []*Pod {
	return []*Pod{
		{Name: "web1", Node: "n1", Namespace: "default", Labels: map[string]string{"app": "web"}},
		{Name: "api", Node: "n1", Namespace: "prod", Labels: map[string]string{"app": "api", "tier": "backend"}},
		{Name: "db1", Node: "n2", Namespace: "default", Labels: map[string]string{"app": "db"}},
		{Name: "client", Node: "n2", Namespace: "dev", Labels: map[string]string{"app": "client"}},
		{Name: "db2", Node: "n3", Namespace: "prod", Labels: map[string]string{"app": "db", "tier": "backend"}},
		{Name: "web2", Node: "n3", Namespace: "dev", Labels: map[string]string{"app": "web"}},
	}
}

// Subnet is the pods' subnet; the cases' ipBlocks are written for it
// ({{subnet}}). Subnet6 is the pods' subnet of an IPv6 pass: the pods'
// addresses (Pod.IP) are IPv6 ones from it.
const (
	Subnet  = "198.51.100.0/24"
	Subnet6 = "2001:db8:100::/64"
)

// Case is one step of the suite: a name and a YAML stream of
// NetworkPolicies, in which {{NAME}} stands for the address of pod NAME,
// and, for the pods' address family, {{subnet}} for the pods' subnet
// (Subnet or Subnet6), {{all}} for every address (0.0.0.0/0 or ::/0) and
// {{bits}} for the length of one address (32 or 128).
type Case struct {
	Name, YAML string
	// Open: the case's matrix is the open one (no policy) on purpose.
	// Every other case must change the matrix, or it tests nothing.
	Open bool
}

// Cases is the suite.
var Cases = []Case{
	{Name: "deny all ingress in a namespace", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: deny-all-ingress, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}`},
	{Name: "deny all egress in a namespace", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: deny-all-egress, namespace: dev}
spec: {podSelector: {}, policyTypes: [Egress]}`},
	{Name: "allow only the same namespace", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-deny-all, namespace: prod}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-same-namespace, namespace: prod}
spec:
  podSelector: {}
  ingress: [{from: [{podSelector: {}}]}]`},
	{Name: "allow from a namespace by label", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-prod, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: prod}}}]}]`},
	{Name: "podSelector AND namespaceSelector in one peer", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-dev-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: dev}}, podSelector: {matchLabels: {app: web}}}]}]`},
	{Name: "podSelector OR namespaceSelector as two peers", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-dev-or-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: dev}}}, {podSelector: {matchLabels: {app: web}}}]}]`},
	{Name: "ipBlock with except", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-subnet-but-client, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{ipBlock: {cidr: "{{subnet}}", except: ["{{client}}/{{bits}}"]}}]}]`},
	{Name: "port range with endPort", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-port-range, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: TCP, port: 8000, endPort: 8100}]}]`},
	{Name: "egress deny with DNS allowed", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: dev-dns-only, namespace: dev}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]}]`},
	{Name: "deny all plus allow all is allow all", Open: true, YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: default-deny, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: default-allow-all, namespace: default}
spec: {podSelector: {}, ingress: [{}]}`},
	{Name: "two policies on one pod are a union", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-web-80, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}], ports: [{port: 80}]}]
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-api-443, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: api}}}], ports: [{protocol: TCP, port: 443}]}]`},
	{Name: "egress only to db on TCP 80", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-to-db-80, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: db}}}], ports: [{protocol: TCP, port: 80}]}]`},
	{Name: "both types with empty rule lists deny both ways", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: api-isolated, namespace: prod}
spec: {podSelector: {matchLabels: {app: api}}, policyTypes: [Ingress, Egress]}`},
	{Name: "matchExpressions Exists and In", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: backend-from-web-or-client, namespace: prod}
spec:
  podSelector: {matchExpressions: [{key: tier, operator: Exists}]}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: app, operator: In, values: [web, client]}]}}]}]`},
	{Name: "matchExpressions NotIn and DoesNotExist", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-not-from-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}, podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}}]}]`},
	{Name: "UDP only", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-udp-5353, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: UDP, port: 5353}]}]`},
	{Name: "web from web in every namespace", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-from-web, namespace: dev}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}]}]`},
	{Name: "namespace by its name label", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-prod-by-name, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: prod}}}]}]`},
	{Name: "egress to an ipBlock", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: client-to-db2-only, namespace: dev}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress: [{to: [{ipBlock: {cidr: "{{db2}}/{{bits}}"}}]}]`},
	{Name: "port without protocol is TCP", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-443, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{port: 443}]}]`},
	{Name: "protocol without port is every port", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-any-udp-sctp, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: UDP}, {protocol: SCTP}]}]`},
	{Name: "a policy selecting nothing changes nothing", Open: true, YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: selects-nothing, namespace: default}
spec: {podSelector: {matchLabels: {app: nothing}}, policyTypes: [Ingress, Egress]}`},
	{Name: "egress rules without policyTypes isolate both ways", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-egress-in-prod, namespace: prod}
spec:
  podSelector: {}
  egress: [{to: [{namespaceSelector: {matchLabels: {env: prod}}}]}]`},
	{Name: "ingress and egress rules on one pod", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: api-both, namespace: prod}
spec:
  podSelector: {matchLabels: {app: api}}
  policyTypes: [Ingress, Egress]
  ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}}]}]
  egress: [{to: [{podSelector: {matchLabels: {app: db}}}], ports: [{port: 80}, {port: 443}]}]`},
	{Name: "ipBlock of the world except the pods", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-from-outside-only, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{ipBlock: {cidr: "{{all}}", except: ["{{subnet}}"]}}]}]`},
	{Name: "range edges", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-range-edges, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: TCP, port: 80, endPort: 80}, {protocol: TCP, port: 444, endPort: 8080}, {protocol: SCTP, port: 80}]}]`},
	{Name: "egress allowed by one side, ingress denied by the other", YAML: `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: client-egress-all, namespace: dev}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {}}]}]
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db1-from-web-only, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}]}]`},
}
