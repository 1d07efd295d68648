package guest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// RigNode is a node of a Rig: its name, datapath mode ("offload": a
// netdevsim eswitch in switchdev mode, pods standing in for its VFs; or
// "software"), underlay address, optional host address (the other
// family's, skiff-agent --host-ip), and pods (in VF order on an offload
// node).
type RigNode struct {
	Name, Mode, IP, HostIP string
	Pods                   []string
}

// Rig is the real controller and one agent per node, each node a
// namespace (Prefix+name) on an underlay bridge (Prefix+"br",
// 192.0.2.0/24, the controller on its .254), each pod a namespace
// (Prefix+"p"+pod).
type Rig struct {
	Prefix string
	Dir    string
	Ctl    Ctl
	Nodes  []RigNode
	// Agents holds each node's skiff-agent by node name.
	Agents map[string]*Daemon
	socks  map[string]string
	pfs    map[string]string
}

// Outside adds a host on the underlay that is not a node: the namespace
// r.Prefix+name with eth0 holding addr/24, its peer u+name on the
// underlay bridge. It returns the namespace's name; it goes when the test
// ends. StartRig makes each node's namespace so.
func (r *Rig) Outside(t *testing.T, name, addr string) string {
	t.Helper()
	ns := r.Prefix + name
	AddNetns(t, ns)
	Run(t, IP, "link", "add", "u"+name, "type", "veth", "peer", "name", "eth0", "netns", ns)
	Run(t, IP, "link", "set", "u"+name, "master", r.Prefix+"br", "up")
	In(t, ns, IP, "addr", "add", addr+"/24", "dev", "eth0")
	In(t, ns, IP, "link", "set", "eth0", "up")
	return ns
}

// StartRig builds a Rig: the underlay bridge, the controller (on port),
// then per node its pods' namespaces (before the agent: see offloadvm),
// its namespace with eth0 on the bridge holding its address, strict
// reverse-path filtering there (as on a real node: a pod's reply that
// takes the underlay instead of the overlay back to a host port is
// dropped), its host address if it has one (a /128 on eth0, without
// DAD: the underlay routes nothing of that family between the nodes),
// for an offload node an eswitch (netdevsim id eswitchID+i), and its
// agent; it waits until every node has registered. Everything
// goes when the test ends.
func StartRig(t *testing.T, prefix string, port, eswitchID int, nodes []RigNode) *Rig {
	t.Helper()
	r := &Rig{Prefix: prefix, Dir: t.TempDir(), Nodes: nodes, Agents: map[string]*Daemon{}, socks: map[string]string{}, pfs: map[string]string{}}
	UnderlayBridge(t, prefix+"br", "192.0.2.254/24")
	ctlAddr := fmt.Sprintf("192.0.2.254:%d", port)
	r.Ctl = StartController(t, ctlAddr, r.Dir)
	for i, n := range nodes {
		ns := prefix + n.Name
		for _, p := range n.Pods {
			AddNetns(t, prefix+"p"+p)
		}
		r.Outside(t, n.Name, n.IP)
		In(t, ns, "/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 1 > /proc/sys/net/ipv4/conf/eth0/rp_filter")
		if n.Mode == "offload" {
			r.pfs[n.Name] = SwitchdevEswitch(t, ns, eswitchID+i, len(n.Pods))
		}
		r.socks[n.Name] = filepath.Join(r.Dir, n.Name+".sock")
		args := []string{"--controller", ctlAddr, "--node", n.Name, "--underlay-ip", n.IP,
			"--state-dir", filepath.Join(r.Dir, n.Name+".state"), "--socket", r.socks[n.Name], "--mode", n.Mode}
		if n.HostIP != "" {
			In(t, ns, IP, "addr", "add", n.HostIP+"/128", "dev", "eth0", "nodad")
			args = append(args, "--host-ip", n.HostIP)
		}
		r.Agents[n.Name] = StartIn(t, ns, "skiff-agent", args...)
	}
	testkit.Eventually(t, "every node registered", 60*time.Second, func() (bool, string) {
		out, err := r.Ctl.Run("get", "nodes", "-o", "json")
		return err == nil && strings.Count(out, `"underlayIp"`) == len(nodes), out
	})
	return r
}

// CreatePod creates pod p of network on node n through n's local API
// (labels app=p; on an offload node, the VF of p's index in n.Pods) and
// returns its first address, without the prefix length.
func (r *Rig) CreatePod(t *testing.T, n RigNode, p, network string) string {
	t.Helper()
	resp := r.CreatePods(t, n, []string{p}, network, 1)[p]
	t.Logf("%s (%s) on %s: %s", p, network, n.Name, resp.IPs[0])
	return strings.Split(resp.IPs[0], "/")[0]
}

// CreatePods creates pods of network on node n as CreatePod does, width
// requests at a time, and returns the local API's answer for each.
func (r *Rig) CreatePods(t *testing.T, n RigNode, pods []string, network string, width int) map[string]localapi.CreateResponse {
	t.Helper()
	reqs := make([]localapi.CreateRequest, len(pods))
	for i, p := range pods {
		reqs[i] = localapi.CreateRequest{Name: p, Network: network, NetNS: HoldNetns(t, r.Prefix+"p"+p), IfName: "eth0",
			Labels: map[string]string{"app": p}, Owner: "pod:default/" + p, Namespace: "default"}
		if n.Mode == "offload" {
			if vf := slices.Index(n.Pods, p); vf >= 0 {
				reqs[i].PF, reqs[i].VF = r.pfs[n.Name], &vf
			}
		}
	}
	out := make([]localapi.CreateResponse, len(pods))
	errs := make([]error, len(pods))
	sem := make(chan struct{}, max(width, 1))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			resp, err := localapi.NewClient(r.socks[n.Name]).Create(ctx, reqs[i])
			if err == nil {
				out[i] = *resp
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	m := map[string]localapi.CreateResponse{}
	for i, p := range pods {
		if errs[i] != nil {
			t.Fatalf("create %s on %s: %v", p, n.Name, errs[i])
		}
		m[p] = out[i]
	}
	return m
}

// WaitApplied waits until node's agent has applied (its datapath, without
// error) a plan at revision rev or later: what the controller stored at
// rev has reached that node's kernel. rev is the store revision of a
// change to that node's plan (a node's plan moves only with its own
// changes).
func (r *Rig) WaitApplied(t *testing.T, node string, rev int64, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%s applied revision %d", node, rev), within, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := localapi.NewClient(r.socks[node]).Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return s.Applied >= rev, fmt.Sprintf("%+v", *s)
	})
}
