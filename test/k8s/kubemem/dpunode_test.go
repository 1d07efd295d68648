package kubemem

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// TestDPUHostNetworkUnavailable: with the Kubernetes adapter running in
// the real skiff-controller (--kubeconfig, as a Deployment runs it), a
// dpu-host node's Node gets NetworkUnavailable (reason
// SkiffDPUNotConnected, naming the DPU) when its DPU's agent has no plan
// stream although the host's own agent has one, and loses it when the
// DPU's agent is back. The two agents are clients of the controller's
// AgentService (Register, StreamPlan), as skiff-agent is: a plan stream
// is what makes an agent connected; the Node has no kubelet.
func TestDPUHostNetworkUnavailable(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ControlPlaneOnly: true,
		ControllerManagerArgs: []string{"--controllers=*,-nodelifecycle,-podgc"}})
	client := c.Client(t)
	ctx := t.Context()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h1",
		Labels: map[string]string{"kubernetes.io/hostname": "h1", "kubernetes.io/os": "linux"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, c, "--kubeconfig", c.Kubeconfig)
	condition := func() string {
		n, err := client.CoreV1().Nodes().Get(ctx, "h1", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable {
				return fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		return "none"
	}
	wait := func(what, prefix string) time.Duration {
		t.Helper()
		start := time.Now()
		for !strings.HasPrefix(condition(), prefix) {
			if time.Since(start) > time.Minute {
				t.Fatalf("%s: h1's NetworkUnavailable is %q, want %q...", what, condition(), prefix)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	// stream registers node and holds its plan stream until the returned
	// function is called.
	stream := func(n *skiffv1.Node) func() {
		t.Helper()
		if _, err := ctl.agent.Register(ctx, &skiffv1.RegisterRequest{Node: n}); err != nil {
			t.Fatalf("register %s: %v", n.Name, err)
		}
		sctx, cancel := context.WithCancel(ctx)
		s, err := ctl.agent.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: n.Name})
		if err != nil {
			t.Fatalf("plan stream of %s: %v", n.Name, err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("plan of %s: %v", n.Name, err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := s.Recv(); err != nil {
					return
				}
			}
		}()
		return func() { cancel(); <-done }
	}

	wait("no agent registered h1", "True SkiffAgentNotConnected")
	dpu := &skiffv1.Node{Name: "d1", UnderlayIp: "192.0.2.11", Mode: "dpu", AgentVersion: "test"}
	host := &skiffv1.Node{Name: "h1", UnderlayIp: "192.0.2.10", Mode: "dpu-host", Dpu: "d1", AgentVersion: "test"}
	stopDPU := stream(dpu)
	stopHost := stream(host)
	defer func() { stopHost() }()
	t.Logf("both agents connected -> h1 NetworkUnavailable False in %v", wait("both agents connected", "False SkiffAgentConnected").Round(time.Millisecond))

	stopDPU()
	took := wait("the DPU's agent gone", "True SkiffDPUNotConnected")
	if got := condition(); !strings.Contains(got, `"d1"`) {
		t.Errorf("the condition does not name the DPU: %q", got)
	}
	t.Logf("DPU agent's plan stream ended -> h1 NetworkUnavailable True (%s) in %v", condition(), took.Round(time.Millisecond))

	stopDPU = stream(dpu)
	defer func() { stopDPU() }()
	t.Logf("DPU agent back -> h1 NetworkUnavailable False in %v", wait("the DPU's agent back", "False SkiffAgentConnected").Round(time.Millisecond))
}
