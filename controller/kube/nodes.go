package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Nodes: a Node deleted from the API frees its endpoints (and its Skiff
// registration when its agent is not connected). A Node's InternalIP is
// checked against the underlay address its agent registered: a mismatch
// is logged, counted in skiff_kube_node_underlay_mismatch and reported as
// a Warning Event. The Node's NetworkUnavailable condition is True while
// its agent holds no session with the controller (it never registered,
// stopped, or lost its lease) and False while it does; the controller's
// node watch pushes every change. A host in mode dpu-host is also
// NetworkUnavailable while its DPU's agent is not connected (its pods
// cannot be plumbed then).

// Condition reasons.
const (
	ReasonAgentConnected    = "SkiffAgentConnected"
	ReasonAgentNotConnected = "SkiffAgentNotConnected"
	ReasonDPUNotConnected   = "SkiffDPUNotConnected"
)

// skiffNode is what the adapter knows of a node's Skiff registration.
type skiffNode struct {
	underlay  string
	connected bool
	dpu       string // a dpu-host's DPU node
}

func nodeChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := new.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !slices.Equal(internalIPs(o), internalIPs(n)) || conditionOf(o) != conditionOf(n)
}

func (t *term) nodeDeleted(key string) {
	t.mu.Lock()
	t.goneNodes[key] = true
	t.mu.Unlock()
}

// internalIPs are a Node's InternalIP addresses, normalized.
func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.String())
		}
	}
	return out
}

// conditionOf is a Node's NetworkUnavailable status ("" when it has none).
func conditionOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status
		}
	}
	return ""
}

// networkCondition is the NetworkUnavailable condition for an agent's
// state.
func networkCondition(registered, connected bool, now time.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	switch {
	case connected:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonAgentConnected, "skiff-agent is connected to the controller"
	case registered:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonAgentNotConnected, "skiff-agent is not connected to the controller"
	default:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonAgentNotConnected, "no skiff-agent has registered this node"
	}
	return c
}

// withDPU is a dpu-host's condition c given its DPU's agent: True while
// that agent is not connected, even when the host's own is.
func withDPU(c corev1.NodeCondition, dpu string, registered, connected bool) corev1.NodeCondition {
	if dpu == "" || connected || c.Status != corev1.ConditionFalse {
		return c
	}
	c.Status, c.Reason = corev1.ConditionTrue, ReasonDPUNotConnected
	c.Message = fmt.Sprintf("the skiff-agent of this node's DPU %q is not connected to the controller", dpu)
	if !registered {
		c.Message = fmt.Sprintf("this node's DPU %q has never registered with the controller", dpu)
	}
	return c
}

// conditionPatch is the strategic merge patch that sets one condition of
// a Node's status (conditions merge by type).
func conditionPatch(c corev1.NodeCondition) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
}

// underlayMismatch says whether a registered node's underlay address is
// not among its InternalIPs (a Node without InternalIP is not checked).
func underlayMismatch(n *corev1.Node, underlay string) bool {
	ips := internalIPs(n)
	return underlay != "" && len(ips) > 0 && !slices.Contains(ips, underlay)
}

func (t *term) setSkiffNode(n *skiffv1.Node, deleted bool) {
	t.mu.Lock()
	if deleted {
		delete(t.skiffNodes, n.GetName())
	} else {
		t.skiffNodes[n.GetName()] = skiffNode{underlay: n.GetUnderlayIp(), connected: n.GetConnected(), dpu: n.GetDpu()}
	}
	var hosts []string
	for name, sk := range t.skiffNodes {
		if sk.dpu == n.GetName() {
			hosts = append(hosts, name)
		}
	}
	t.mu.Unlock()
	t.nodeQ.Add(n.GetName())
	for _, h := range hosts {
		t.nodeQ.Add(h) // its DPU came or went
	}
}

// loadSkiffNodes reads the registered nodes before the node workers run.
func (t *term) loadSkiffNodes(ctx context.Context) error {
	l, err := t.mgmt.ListNodes(ctx, &skiffv1.ListRequest{})
	if err != nil {
		return fmt.Errorf("kube: list Skiff nodes: %w", err)
	}
	for _, n := range l.GetNodes() {
		t.setSkiffNode(n, false)
	}
	return nil
}

// watchSkiffNodes follows the controller's nodes (registrations and
// connection status) until ctx ends, opening the watch again when it
// breaks; each (re)open starts with every node as it is.
func (t *term) watchSkiffNodes(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := t.mgmt.Watch(ctx, &skiffv1.WatchRequest{Kinds: []string{"node"}, Initial: true})
		if err == nil {
			for {
				ev, rerr := w.Recv()
				if rerr != nil {
					if rerr != io.EOF && ctx.Err() == nil {
						err = rerr
					}
					break
				}
				if n := ev.GetNode(); n != nil {
					t.setSkiffNode(n, ev.GetType() == skiffv1.WatchEvent_TYPE_DELETE)
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		t.log.Warn("controller node watch ended; opening it again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (t *term) syncNode(ctx context.Context, key string) error {
	t.mu.Lock()
	sk, registered := t.skiffNodes[key]
	dpu, dpuRegistered := t.skiffNodes[sk.dpu]
	gone := t.goneNodes[key]
	t.mu.Unlock()
	n, err := t.nodes.Get(key)
	switch {
	case apierrors.IsNotFound(err):
		if gone {
			return t.nodeGone(ctx, key, registered && sk.connected)
		}
		return nil // a Skiff node that is no Kubernetes Node (a DPU's agent)
	case err != nil:
		return err
	}
	t.mu.Lock()
	delete(t.goneNodes, key)
	t.mu.Unlock()
	t.checkUnderlay(n, sk.underlay, registered)
	want := withDPU(networkCondition(registered, sk.connected, time.Now()), sk.dpu, dpuRegistered, dpu.connected)
	if conditionOf(n) == want.Status {
		return nil
	}
	patch, err := conditionPatch(want)
	if err != nil {
		return err
	}
	if _, err := t.client.CoreV1().Nodes().PatchStatus(ctx, key, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("set NetworkUnavailable=%s on node %s: %w", want.Status, key, err)
	}
	t.log.Info("node condition set", "node", key, "NetworkUnavailable", want.Status, "reason", want.Reason)
	return nil
}

// checkUnderlay compares a Node's InternalIPs with its agent's underlay
// address and reports a change of verdict once.
func (t *term) checkUnderlay(n *corev1.Node, underlay string, registered bool) {
	bad := registered && underlayMismatch(n, underlay)
	t.mu.Lock()
	was := t.mismatched[n.Name]
	if bad {
		t.mismatched[n.Name] = true
	} else {
		delete(t.mismatched, n.Name)
	}
	t.mu.Unlock()
	if bad {
		t.m.mismatch.WithLabelValues(n.Name).Set(1)
	} else {
		t.m.mismatch.DeleteLabelValues(n.Name)
	}
	if bad && !was {
		t.log.Warn("node's InternalIP is not its agent's underlay address", "node", n.Name, "internalIPs", internalIPs(n), "underlay", underlay)
		t.recorder.Eventf(n, corev1.EventTypeWarning, ReasonUnderlayMismatch,
			"skiff-agent registered underlay address %s, which is not an InternalIP of this Node (%v)", underlay, internalIPs(n))
	}
}

// nodeGone frees the endpoints of a Node deleted from the API, and its
// Skiff registration unless its agent is still connected.
func (t *term) nodeGone(ctx context.Context, name string, connected bool) error {
	r, err := t.mgmt.DeleteEndpoints(ctx, &skiffv1.DeleteEndpointsRequest{Node: name})
	if err != nil {
		return fmt.Errorf("delete endpoints of node %s: %w", name, err)
	}
	if !connected {
		if _, err := t.mgmt.DeleteNode(ctx, &skiffv1.DeleteRequest{Name: name}); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("delete node %s: %w", name, err)
		}
	}
	t.mu.Lock()
	delete(t.goneNodes, name)
	delete(t.mismatched, name)
	t.mu.Unlock()
	t.m.mismatch.DeleteLabelValues(name)
	t.log.Info("node deleted from the API: its endpoints are freed", "node", name, "endpoints", r.GetDeleted(), "registrationKept", connected)
	return nil
}
