package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// The truth-table test: a suite of Kubernetes NetworkPolicies, each case
// applied with skiffctl to a 3-node cluster of pods made by the CNI
// plugin, and the reachability matrix measured with real TCP, UDP and ICMP
// must equal the one a plain reading of the Kubernetes rules gives
// (k8sAllows below, which shares no code with Skiff's compiler). SCTP rules
// are compiled and installed, but this kernel has no SCTP to send.

type ttPod struct {
	name, node, ns string
	labels         map[string]string
	netns, ip      string
}

type probe struct {
	proto string // TCP, UDP or ICMP
	port  int
}

var ttProbes = []probe{{"TCP", 53}, {"TCP", 80}, {"TCP", 443}, {"TCP", 8080}, {"UDP", 53}, {"UDP", 5353}, {"ICMP", 0}}

var ttNamespaces = map[string]map[string]string{
	"default": {},
	"prod":    {"env": "prod", "team": "core"},
	"dev":     {"env": "dev"},
}

// ttCases: name and YAML. {{NAME}} is replaced by the pod's address.
var ttCases = []struct{ name, yaml string }{
	{"deny all ingress in a namespace", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: deny-all-ingress, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}`},
	{"deny all egress in a namespace", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: deny-all-egress, namespace: dev}
spec: {podSelector: {}, policyTypes: [Egress]}`},
	{"allow only the same namespace", `
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
	{"allow from a namespace by label", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-prod, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: prod}}}]}]`},
	{"podSelector AND namespaceSelector in one peer", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-dev-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: dev}}, podSelector: {matchLabels: {app: web}}}]}]`},
	{"podSelector OR namespaceSelector as two peers", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-dev-or-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {env: dev}}}, {podSelector: {matchLabels: {app: web}}}]}]`},
	{"ipBlock with except", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-subnet-but-client, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{ipBlock: {cidr: 198.51.100.0/24, except: ["{{client}}/32"]}}]}]`},
	{"port range with endPort", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-port-range, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: TCP, port: 8000, endPort: 8100}]}]`},
	{"egress deny with DNS allowed", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: dev-dns-only, namespace: dev}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]}]`},
	{"deny all plus allow all is allow all", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: default-deny, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: default-allow-all, namespace: default}
spec: {podSelector: {}, ingress: [{}]}`},
	{"two policies on one pod are a union", `
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
	{"egress only to db on TCP 80", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-to-db-80, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: db}}}], ports: [{protocol: TCP, port: 80}]}]`},
	{"both types with empty rule lists deny both ways", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: api-isolated, namespace: prod}
spec: {podSelector: {matchLabels: {app: api}}, policyTypes: [Ingress, Egress]}`},
	{"matchExpressions Exists and In", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: backend-from-web-or-client, namespace: prod}
spec:
  podSelector: {matchExpressions: [{key: tier, operator: Exists}]}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: app, operator: In, values: [web, client]}]}}]}]`},
	{"matchExpressions NotIn and DoesNotExist", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-not-from-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}, podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}}]}]`},
	{"UDP only", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-udp-5353, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: UDP, port: 5353}]}]`},
	{"web from web in every namespace", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-from-web, namespace: dev}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}]}]`},
	{"namespace by its name label", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-from-prod-by-name, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: prod}}}]}]`},
	{"egress to an ipBlock", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: client-to-db2-only, namespace: dev}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress: [{to: [{ipBlock: {cidr: "{{db2}}/32"}}]}]`},
	{"port without protocol is TCP", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-443, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{port: 443}]}]`},
	{"protocol without port is every port", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-db-any-udp, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: UDP}]}]`},
	{"a policy selecting nothing changes nothing", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: selects-nothing, namespace: default}
spec: {podSelector: {matchLabels: {app: nothing}}, policyTypes: [Ingress, Egress]}`},
	{"egress rules without policyTypes isolate both ways", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: prod-egress-in-prod, namespace: prod}
spec:
  podSelector: {}
  egress: [{to: [{namespaceSelector: {matchLabels: {env: prod}}}]}]`},
	{"ingress and egress rules on one pod", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: api-both, namespace: prod}
spec:
  podSelector: {matchLabels: {app: api}}
  policyTypes: [Ingress, Egress]
  ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}}]}]
  egress: [{to: [{podSelector: {matchLabels: {app: db}}}], ports: [{port: 80}, {port: 443}]}]`},
	{"ipBlock of the world except the pods", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: web-from-outside-only, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0, except: [198.51.100.0/24]}}]}]`},
	{"range edges", `
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: db-range-edges, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{protocol: TCP, port: 80, endPort: 80}, {protocol: TCP, port: 444, endPort: 8080}, {protocol: SCTP, port: 80}]}]`},
	{"egress allowed by one side, ingress denied by the other", `
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

func TestPolicyTruthTable(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	for name, ls := range ttNamespaces {
		for k, v := range ls {
			c.mustCtl("namespace", "label", name, k+"="+v)
		}
	}
	pods := []*ttPod{
		{name: "web1", node: "n1", ns: "default", labels: map[string]string{"app": "web"}},
		{name: "api", node: "n1", ns: "prod", labels: map[string]string{"app": "api", "tier": "backend"}},
		{name: "db1", node: "n2", ns: "default", labels: map[string]string{"app": "db"}},
		{name: "client", node: "n2", ns: "dev", labels: map[string]string{"app": "client"}},
		{name: "db2", node: "n3", ns: "prod", labels: map[string]string{"app": "db", "tier": "backend"}},
		{name: "web2", node: "n3", ns: "dev", labels: map[string]string{"app": "web"}},
	}
	ips := map[string]string{}
	for _, p := range pods {
		p.netns = testns.New(t)
		lb, _ := yaml.Marshal(p.labels)
		lj, _ := yaml.YAMLToJSON(lb)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"blue","type":"skiff-cni","network":"blue","socket":%q,"labels":%s}`, c.nodes[p.node].socket, lj)
		eventually(t, func() error { _, err := cniRun("STATUS", "", "", "", conf); return err })
		if _, err := cniRunIn(p.ns, "ADD", p.name, testns.Path(p.netns), "eth0", conf); err != nil {
			t.Fatal(err)
		}
		p.ip = firstIPv4(t, p.netns)
		ips[p.name] = p.ip
		serve(t, p)
	}
	all := func(policies []networkingv1.NetworkPolicy) map[string]bool {
		m := map[string]bool{}
		for _, src := range pods {
			for _, dst := range pods {
				if src == dst {
					continue
				}
				for _, pr := range ttProbes {
					m[probeKey(src, dst, pr)] = k8sAllows(policies, src, dst, pr)
				}
			}
		}
		return m
	}
	checkMatrix := func(what string, want map[string]bool) {
		t.Helper()
		start := time.Now()
		var diff []string
		for time.Since(start) < 20*time.Second {
			got := measure(pods)
			diff = diff[:0]
			for _, k := range slices.Sorted(mapsKeys(want)) {
				if got[k] != want[k] {
					diff = append(diff, fmt.Sprintf("%s: measured %v, Kubernetes says %v", k, got[k], want[k]))
				}
			}
			if len(diff) == 0 {
				t.Logf("%s: %d probes match (%v)", what, len(want), time.Since(start).Round(time.Millisecond))
				return
			}
		}
		t.Errorf("%s: the measured matrix differs from Kubernetes' in %d of %d probes:\n%s", what, len(diff), len(want), strings.Join(diff, "\n"))
	}
	open := all(nil)
	checkMatrix("no policy", open)
	repl := strings.NewReplacer(func() []string {
		var r []string
		for n, ip := range ips {
			r = append(r, "{{"+n+"}}", ip)
		}
		return r
	}()...)
	npols := 0
	for _, tc := range ttCases {
		doc := repl.Replace(tc.yaml)
		var pols []networkingv1.NetworkPolicy
		for _, d := range strings.Split(doc, "\n---\n") {
			var np networkingv1.NetworkPolicy
			if err := yaml.UnmarshalStrict([]byte(d), &np); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			pols = append(pols, np)
		}
		npols += len(pols)
		want := all(pols)
		if mapsEqual(want, open) && tc.name != "deny all plus allow all is allow all" && tc.name != "a policy selecting nothing changes nothing" {
			t.Fatalf("%s: the case changes nothing: it tests nothing", tc.name)
		}
		file := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		c.mustCtl("policy", "apply", "-f", file)
		checkMatrix(tc.name, want)
		for _, p := range pols {
			c.mustCtl("delete", "policy", p.Namespace+"/"+p.Name)
		}
		// Deleting lifts the isolation, so the next case starts open
		// and cannot pass on what this one left.
		checkMatrix(tc.name+", deleted", open)
	}
	t.Logf("%d cases, %d policies", len(ttCases), npols)
	if npols < 25 {
		t.Fatalf("the suite has %d policies; it must have at least 25", npols)
	}
}

func probeKey(src, dst *ttPod, pr probe) string {
	if pr.proto == "ICMP" {
		return fmt.Sprintf("%s -> %s ICMP", src.name, dst.name)
	}
	return fmt.Sprintf("%s -> %s %s/%d", src.name, dst.name, pr.proto, pr.port)
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// cniRunIn is cniRun for a pod in a Kubernetes namespace.
func cniRunIn(podNS, command, containerID, netns, ifName, conf string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "skiff-cni"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+ifName, "CNI_PATH="+binDir, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+podNS+";K8S_POD_NAME="+containerID)
	cmd.Stdin = strings.NewReader(conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, out)
	}
	return string(out), nil
}

// serve opens the probe ports inside the pod: TCP listeners that accept
// and close, UDP sockets that echo.
func serve(t *testing.T, p *ttPod) {
	err := ns.WithNetNSPath(testns.Path(p.netns), func(ns.NetNS) error {
		for _, pr := range ttProbes {
			addr := net.JoinHostPort(p.ip, fmt.Sprint(pr.port))
			switch pr.proto {
			case "TCP":
				l, err := net.Listen("tcp", addr)
				if err != nil {
					return err
				}
				t.Cleanup(func() { l.Close() })
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
			case "UDP":
				u, err := net.ListenPacket("udp", addr)
				if err != nil {
					return err
				}
				t.Cleanup(func() { u.Close() })
				go func() {
					buf := make([]byte, 64)
					for {
						n, from, err := u.ReadFrom(buf)
						if err != nil {
							return
						}
						_, _ = u.WriteTo(buf[:n], from)
					}
				}()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
}

// measure probes every ordered pair of pods on every probe, concurrently,
// and returns what passed.
func measure(pods []*ttPod) map[string]bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := map[string]bool{}
	for _, src := range pods {
		for _, dst := range pods {
			if src == dst {
				continue
			}
			for _, pr := range ttProbes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok := reach(src, dst, pr)
					mu.Lock()
					got[probeKey(src, dst, pr)] = ok
					mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	return got
}

func reach(src, dst *ttPod, pr probe) bool {
	if pr.proto == "ICMP" {
		_, err := testns.Try(src.netns, "ping", "-c", "1", "-W", "1", "-n", "-q", dst.ip)
		return err == nil
	}
	ok := false
	_ = ns.WithNetNSPath(testns.Path(src.netns), func(ns.NetNS) error {
		addr := net.JoinHostPort(dst.ip, fmt.Sprint(pr.port))
		c, err := net.DialTimeout(strings.ToLower(pr.proto), addr, time.Second)
		if err != nil {
			return nil
		}
		defer c.Close()
		if pr.proto == "TCP" {
			ok = true
			return nil
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("probe")); err != nil {
			return nil
		}
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		ok = err == nil && string(buf[:n]) == "probe"
		return nil
	})
	return ok
}

// k8sAllows reads the Kubernetes NetworkPolicy rules literally: a flow
// passes when the source may send it (egress) and the destination may
// receive it (ingress).
func k8sAllows(pols []networkingv1.NetworkPolicy, src, dst *ttPod, pr probe) bool {
	return k8sDirection(pols, dst, src, pr, true) && k8sDirection(pols, src, dst, pr, false)
}

// k8sDirection: may pod receive from (ingress) or send to (egress) peer?
func k8sDirection(pols []networkingv1.NetworkPolicy, pod, peer *ttPod, pr probe, ingress bool) bool {
	selected := false
	for _, p := range pols {
		if p.Namespace != pod.ns || !selects(&p.Spec.PodSelector, pod.labels) {
			continue
		}
		in, out := false, false
		if len(p.Spec.PolicyTypes) == 0 {
			in, out = true, len(p.Spec.Egress) > 0
		}
		for _, ty := range p.Spec.PolicyTypes {
			in = in || ty == networkingv1.PolicyTypeIngress
			out = out || ty == networkingv1.PolicyTypeEgress
		}
		if (ingress && !in) || (!ingress && !out) {
			continue
		}
		selected = true
		if ingress {
			for _, r := range p.Spec.Ingress {
				if peersMatch(r.From, p.Namespace, peer) && portsMatch(r.Ports, pr) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if peersMatch(r.To, p.Namespace, peer) && portsMatch(r.Ports, pr) {
					return true
				}
			}
		}
	}
	return !selected
}

func selects(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		panic(err)
	}
	return sel.Matches(labels.Set(l))
}

func peersMatch(peers []networkingv1.NetworkPolicyPeer, policyNS string, peer *ttPod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, x := range peers {
		switch {
		case x.IPBlock != nil:
			ip := netip.MustParseAddr(peer.ip)
			if !netip.MustParsePrefix(x.IPBlock.CIDR).Contains(ip) {
				continue
			}
			excluded := false
			for _, e := range x.IPBlock.Except {
				excluded = excluded || netip.MustParsePrefix(e).Contains(ip)
			}
			if !excluded {
				return true
			}
		default:
			nsOK := peer.ns == policyNS
			if x.NamespaceSelector != nil {
				nl := map[string]string{"kubernetes.io/metadata.name": peer.ns}
				for k, v := range ttNamespaces[peer.ns] {
					nl[k] = v
				}
				nsOK = selects(x.NamespaceSelector, nl)
			}
			podOK := x.PodSelector == nil || selects(x.PodSelector, peer.labels)
			if nsOK && podOK {
				return true
			}
		}
	}
	return false
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, pr probe) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		if proto != pr.proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if int32(pr.port) >= p.Port.IntVal && int32(pr.port) <= end {
			return true
		}
	}
	return false
}
