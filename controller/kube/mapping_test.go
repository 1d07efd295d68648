package kube

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/skiff-sdn/skiff/controller/policy"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// These are unit tests of the pure mapping between Kubernetes objects and
// Skiff's; the adapter itself is tested against a real API server
// (adapter_test.go).

func pod(ns, name string, labels map[string]string, node string, hostNet bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels, ResourceVersion: "7",
			Annotations: map[string]string{"big": strings.Repeat("x", 1000)}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec:   corev1.PodSpec{NodeName: node, HostNetwork: hostNet, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "1d"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.51.100.7", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func TestTransformKeepsOnlyWhatIsRead(t *testing.T) {
	p := pod("shop", "web-1", map[string]string{"app": "web"}, "n1", false)
	got, err := transform(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `{"metadata":{"name":"web-1","namespace":"shop","uid":"uid-web-1","resourceVersion":"7","labels":{"app":"web"}},"spec":{"containers":null,"nodeName":"n1"},"status":{}}`
	if string(b) != want {
		t.Errorf("slim pod:\n%s\nwant\n%s", b, want)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeInternalIP, Address: "192.0.2.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}},
			Images:     []corev1.ContainerImage{{Names: []string{"busybox"}}},
		}}
	got, _ = transform(n)
	b, _ = json.Marshal(got)
	want = `{"metadata":{"name":"n1"},"spec":{},"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","lastHeartbeatTime":null,"lastTransitionTime":null}],"addresses":[{"type":"InternalIP","address":"192.0.2.1"}],"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}`
	if string(b) != want {
		t.Errorf("slim node:\n%s\nwant\n%s", b, want)
	}
	other := &corev1.ConfigMap{}
	if x, _ := transform(other); x != other {
		t.Error("an object of another kind was changed")
	}
}

func TestPodOwner(t *testing.T) {
	o, ok := podOwner(pod("shop", "web-1", map[string]string{"app": "web"}, "n1", false))
	want := &skiffv1.Owner{Name: "pod:shop/web-1", Namespace: "shop", Labels: map[string]string{"app": "web"}, Uid: "uid-web-1", Node: "n1"}
	if !ok || !sameOwner(o, want) {
		t.Errorf("owner %v, want %v", o, want)
	}
	stored := &skiffv1.Owner{Name: "pod:shop/web-1", Namespace: "shop", Labels: map[string]string{"app": "web"}, Uid: "uid-web-1", Node: "n1", Revision: 9}
	if !sameOwner(o, stored) {
		t.Error("a stored record differing only in revision is not the same")
	}
	if _, ok := podOwner(pod("kube-system", "proxy", nil, "n1", true)); ok {
		t.Error("a host-network pod got an owner record")
	}
	for in, want := range map[string]string{"pod:shop/web-1": "shop/web-1", "vm:x": "", "pod:web-1": "", "pod:a/b/c": ""} {
		if k, ok := podKeyOf(in); (want == "" && ok) || (want != "" && k != want) {
			t.Errorf("podKeyOf(%q) = %q %v", in, k, ok)
		}
	}
	p := pod("shop", "web-1", map[string]string{"app": "web"}, "n1", false)
	q := p.DeepCopy()
	q.Status.Phase, q.ResourceVersion = corev1.PodSucceeded, "8"
	if podChanged(slimPod(p), slimPod(q)) {
		t.Error("a status change counts as a change")
	}
	q.Labels = map[string]string{"app": "db"}
	if !podChanged(slimPod(p), slimPod(q)) {
		t.Error("a label change does not count")
	}
}

// TestPolicyDocument: the document the adapter applies is the one the
// controller stores for it, so a policy that did not change is not applied
// again at a resync.
func TestPolicyDocument(t *testing.T) {
	port := intstr.FromInt32(80)
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}}}
	doc, err := policyDocument(np)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := policy.ParseYAML([]byte(doc))
	if err != nil || len(ps) != 1 || ps[0].Namespace != "shop" || ps[0].Name != "web" {
		t.Fatalf("parsed %v %v", ps, err)
	}
	// What the store keeps (controller/store ApplyPolicies).
	stored, _ := json.Marshal(map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]string{"namespace": ps[0].Namespace, "name": ps[0].Name}, "spec": ps[0].Spec})
	if string(stored) != doc {
		t.Errorf("stored\n%s\napplied\n%s", stored, doc)
	}
	q := np.DeepCopy()
	q.ResourceVersion = "99"
	if policyChanged(np, q) {
		t.Error("a resourceVersion change counts")
	}
	q.Generation++
	if !policyChanged(np, q) {
		t.Error("a new generation does not count")
	}
}

func TestNodeMapping(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}, {Type: corev1.NodeInternalIP, Address: "2001:db8::0:1"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.1"}}}}
	if got := internalIPs(n); strings.Join(got, ",") != "192.0.2.1,2001:db8::1" {
		t.Errorf("internal IPs %v", got)
	}
	for _, c := range []struct {
		underlay string
		want     bool
	}{{"192.0.2.1", false}, {"2001:db8::1", false}, {"203.0.113.1", true}, {"", false}} {
		if got := underlayMismatch(n, c.underlay); got != c.want {
			t.Errorf("underlay %q: mismatch %v, want %v", c.underlay, got, c.want)
		}
	}
	if underlayMismatch(&corev1.Node{}, "192.0.2.9") {
		t.Error("a Node without InternalIP is a mismatch")
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		registered, connected bool
		status                corev1.ConditionStatus
		reason                string
	}{{false, false, corev1.ConditionTrue, ReasonAgentNotConnected}, {true, false, corev1.ConditionTrue, ReasonAgentNotConnected},
		{true, true, corev1.ConditionFalse, ReasonAgentConnected}} {
		got := networkCondition(c.registered, c.connected, now)
		if got.Type != corev1.NodeNetworkUnavailable || got.Status != c.status || got.Reason != c.reason {
			t.Errorf("registered %v connected %v: %+v", c.registered, c.connected, got)
		}
	}
	up := networkCondition(true, true, now)
	for _, c := range []struct {
		dpu                   string
		registered, connected bool
		status                corev1.ConditionStatus
		reason, msg           string
	}{{"", false, false, corev1.ConditionFalse, ReasonAgentConnected, ""},
		{"d1", true, true, corev1.ConditionFalse, ReasonAgentConnected, ""},
		{"d1", true, false, corev1.ConditionTrue, ReasonDPUNotConnected, `DPU "d1" is not connected`},
		{"d1", false, false, corev1.ConditionTrue, ReasonDPUNotConnected, `DPU "d1" has never registered`}} {
		got := withDPU(up, c.dpu, c.registered, c.connected)
		if got.Status != c.status || got.Reason != c.reason || !strings.Contains(got.Message, c.msg) {
			t.Errorf("DPU %q registered %v connected %v: %+v", c.dpu, c.registered, c.connected, got)
		}
	}
	if got := withDPU(networkCondition(true, false, now), "d1", true, true); got.Reason != ReasonAgentNotConnected {
		t.Errorf("a host whose own agent is away: %+v", got)
	}
	b, err := conditionPatch(networkCondition(true, true, now))
	want := `{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","lastHeartbeatTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"SkiffAgentConnected","message":"skiff-agent is connected to the controller"}]}}`
	if err != nil || string(b) != want {
		t.Errorf("patch %s %v\nwant  %s", b, err, want)
	}
	m := n.DeepCopy()
	m.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
	if !nodeChanged(n, m) || nodeChanged(m, m.DeepCopy()) {
		t.Error("nodeChanged")
	}
}
