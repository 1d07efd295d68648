// Command demo shows Skiff end to end on one machine (root needed): a
// controller with its embedded etcd, three nodes as network namespaces on an
// underlay bridge, each running the real skiff-agent, two tenant networks,
// pods (namespaces) plumbed by the agents, a connectivity matrix measured
// with real pings, per-endpoint counters, a NetworkPolicy enforced and
// explained, and a teardown that leaves nothing
// behind. Pods are network namespaces given their interface by executing
// the real skiff-cni binary, the way a container runtime does. Run it with
// `make demo`.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	prefix   = "skdemo-"
	ctrlAddr = "192.0.2.254:7400"
)

type pod struct{ name, network, node, ns, ip string }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func sh(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func in(ns string, args ...string) (string, error) {
	return sh(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

func step(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

// cleanup removes every namespace the demo may have made, including those
// of an earlier run that was interrupted.
func cleanup() {
	out, _ := sh("ip", "netns", "list")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			_, _ = sh("ip", "netns", "del", f[0])
		}
	}
}

func run() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root (it creates network namespaces)")
	}
	start := time.Now()
	cleanup()
	defer cleanup()
	dir, err := os.MkdirTemp("", "skiff-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	bin, _ := filepath.Abs("bin")
	ul := prefix + "underlay"

	step("underlay: a bridge in %s, three nodes as namespaces on it", ul)
	cmds := [][]string{
		{"ip", "netns", "add", ul},
		{"ip", "netns", "exec", ul, "ip", "link", "set", "lo", "up"},
		// A fixed address: a bridge that follows its ports' lowest MAC
		// cuts off nodes that resolved it before (testkit.UnderlayMAC).
		append([]string{"ip", "netns", "exec", ul, "ip"}, testkit.UnderlayBridgeArgs("ul0")...),
		{"ip", "netns", "exec", ul, "ip", "addr", "add", "192.0.2.254/24", "dev", "ul0"},
		{"ip", "netns", "exec", ul, "ip", "link", "set", "ul0", "up"},
	}
	nodes := []string{"node1", "node2", "node3"}
	for i, n := range nodes {
		ns, ip := prefix+n, fmt.Sprintf("192.0.2.%d", i+1)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", ul, "ip", "link", "add", fmt.Sprintf("ulp%d", i), "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "netns", "exec", ul, "ip", "link", "set", fmt.Sprintf("ulp%d", i), "master", "ul0", "up"},
			[]string{"ip", "netns", "exec", ns, "ip", "addr", "add", ip + "/24", "dev", "eth0"},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"},
			// Nodes forward, as Kubernetes nodes do: isolation between
			// networks must hold anyway.
			[]string{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"})
	}
	for _, c := range cmds {
		if _, err := sh(c...); err != nil {
			return err
		}
	}
	logf, err := os.Create(filepath.Join(dir, "skiff.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	startProc := func(ns string, args ...string) error {
		p := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		p.Stdout, p.Stderr = logf, logf
		if err := p.Start(); err != nil {
			return err
		}
		procs = append(procs, p)
		return nil
	}
	step("skiff-controller with embedded etcd on %s; a skiff-agent on every node", ctrlAddr)
	if err := startProc(ul, bin+"/skiff-controller", "--listen", ctrlAddr, "--data-dir", filepath.Join(dir, "controller")); err != nil {
		return err
	}
	ctl := func(args ...string) (string, error) {
		return in(ul, append([]string{bin + "/skiffctl", "--controller", ctrlAddr}, args...)...)
	}
	if err := retry(func() error { _, err := ctl("get", "nodes"); return err }); err != nil {
		return err
	}
	sockets := map[string]string{}
	for i, n := range nodes {
		sockets[n] = filepath.Join(dir, n+".sock")
		if err := startProc(prefix+n, bin+"/skiff-agent", "--controller", ctrlAddr, "--node", n, "--underlay-ip", fmt.Sprintf("192.0.2.%d", i+1),
			"--state-dir", filepath.Join(dir, n), "--socket", sockets[n], "--stats-interval", "1s"); err != nil {
			return err
		}
	}
	if err := retry(func() error {
		out, _ := ctl("get", "nodes")
		if strings.Count(out, "true") != 3 {
			return fmt.Errorf("agents not all connected:\n%s", out)
		}
		return nil
	}); err != nil {
		return err
	}
	out, _ := ctl("get", "nodes")
	fmt.Print(indent(out))

	step("two tenant networks")
	for _, c := range [][]string{
		{"network", "create", "blue", "--vni", "100"},
		{"subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24"},
		{"network", "create", "red", "--vni", "200"},
		{"subnet", "create", "red-v4", "--network", "red", "--cidr", "203.0.113.0/24"},
	} {
		out, err := ctl(c...)
		if err != nil {
			return err
		}
		fmt.Printf("  $ skiffctl %s\n%s", strings.Join(c, " "), indent(out))
	}

	step("pods: namespaces given their eth0 by executing the real skiff-cni, as a container runtime does")
	pods := []*pod{{name: "blue-a", network: "blue", node: "node1"}, {name: "blue-b", network: "blue", node: "node2"},
		{name: "blue-c", network: "blue", node: "node3"}, {name: "red-a", network: "red", node: "node1"}, {name: "red-c", network: "red", node: "node3"}}
	cni := func(command string, p *pod) (string, error) {
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"skiff-cni","network":%q,"socket":%q,"labels":{"app":%q}}`,
			p.network, p.network, sockets[p.node], p.name)
		cmd := exec.Command(bin + "/skiff-cni")
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+p.name, "CNI_NETNS=/var/run/netns/"+p.ns,
			"CNI_IFNAME=eth0", "CNI_PATH="+bin, "CNI_ARGS=K8S_POD_NAMESPACE=demo;K8S_POD_NAME="+p.name)
		cmd.Stdin = strings.NewReader(conf)
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("skiff-cni %s %s: %v: %s", command, p.name, err, out)
		}
		return string(out), nil
	}
	for _, p := range pods {
		p.ns = prefix + "pod-" + p.name
		if _, err := sh("ip", "netns", "add", p.ns); err != nil {
			return err
		}
		t0 := time.Now()
		out, err := cni("ADD", p)
		if err != nil {
			return err
		}
		var r struct {
			Interfaces []struct{ Mac string }              `json:"interfaces"`
			IPs        []struct{ Address, Gateway string } `json:"ips"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.IPs) == 0 {
			return fmt.Errorf("skiff-cni ADD %s printed %q", p.name, out)
		}
		p.ip = strings.Split(r.IPs[0].Address, "/")[0]
		fmt.Printf("  %-7s on %s: %s %s via %s (CNI ADD %v)\n", p.name, p.node, r.IPs[0].Address, r.Interfaces[1].Mac, r.IPs[0].Gateway, time.Since(t0).Round(time.Millisecond))
	}

	step("every pod reaches its gateway, answered by its own node")
	for _, p := range pods {
		gw := map[string]string{"blue": "198.51.100.1", "red": "203.0.113.1"}[p.network]
		if _, err := in(p.ns, "ping", "-c", "1", "-W", "1", gw); err != nil {
			return fmt.Errorf("%s cannot reach its gateway %s", p.name, gw)
		}
		fmt.Printf("  %-7s -> %s ok\n", p.name, gw)
	}

	step("connectivity matrix, real pings (same network: reachable; across networks: isolated)")
	fmt.Printf("  %-8s", "from\\to")
	for _, q := range pods {
		fmt.Printf(" %-8s", q.name)
	}
	fmt.Println()
	bad := 0
	for _, p := range pods {
		fmt.Printf("  %-8s", p.name)
		for _, q := range pods {
			if p == q {
				fmt.Printf(" %-8s", "-")
				continue
			}
			_, err := in(p.ns, "ping", "-c", "1", "-W", "1", q.ip)
			ok := err == nil
			want := p.network == q.network
			mark := map[bool]string{true: "ok", false: "blocked"}[ok]
			if ok != want {
				mark += "(!)"
				bad++
			}
			fmt.Printf(" %-8s", mark)
		}
		fmt.Println()
	}

	step("per-endpoint counters (reported by the agents every second)")
	time.Sleep(1500 * time.Millisecond)
	out, _ = ctl("get", "endpoints")
	fmt.Print(indent(out))
	step("a Kubernetes NetworkPolicy: blue-c (on node3) admits blue-a only")
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c-from-a, namespace: demo}
spec:
  podSelector: {matchLabels: {app: blue-c}}
  ingress: [{from: [{podSelector: {matchLabels: {app: blue-a}}}]}]
`), 0o600); err != nil {
		return err
	}
	if out, err = ctl("policy", "apply", "-f", pol); err != nil {
		return err
	}
	fmt.Printf("  $ skiffctl policy apply -f policy.yaml\n%s", indent(out))
	reach := func(from, to *pod) bool {
		_, err := in(from.ns, "ping", "-c", "1", "-W", "1", to.ip)
		return err == nil
	}
	a, b, c := pods[0], pods[1], pods[2]
	if err := retry(func() error {
		if reach(b, c) {
			return fmt.Errorf("blue-b still reaches blue-c with the policy applied")
		}
		return nil
	}); err != nil {
		return err
	}
	for _, x := range []struct {
		from, to *pod
		want     bool
	}{{a, c, true}, {b, c, false}, {c, b, true}} {
		ok := reach(x.from, x.to)
		mark := map[bool]string{true: "ok", false: "blocked"}[ok]
		if ok != x.want {
			mark += "(!)"
			bad++
		}
		fmt.Printf("  %-7s -> %-7s %s\n", x.from.name, x.to.name, mark)
	}
	out, _ = ctl("policy", "explain", b.ip, c.ip, "icmp")
	fmt.Printf("  $ skiffctl policy explain %s %s icmp   (blue-b -> blue-c)\n%s", b.ip, c.ip, indent(out))
	if _, err = ctl("delete", "policy", "demo/c-from-a"); err != nil {
		return err
	}
	if err := retry(func() error {
		if !reach(b, c) {
			return fmt.Errorf("blue-b does not reach blue-c after the policy was deleted")
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Println("  policy deleted: blue-b -> blue-c ok again")

	step("node2's plan (skiffctl plan node2)")
	out, _ = ctl("plan", "node2")
	fmt.Print(indent(out))

	for _, p := range pods {
		if _, err := cni("DEL", p); err != nil {
			return err
		}
	}
	step("done in %.1fs; pods deleted, agents and controller stopped, namespaces removed", time.Since(start).Seconds())
	if bad > 0 {
		return fmt.Errorf("%d cells of the matrix were not as expected", bad)
	}
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

func retry(f func() error) error {
	var err error
	for range 200 {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
