package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// TestDeviceID: a create naming its VF by PCI address gets that VF's PF
// and index; an unknown or malformed deviceID, or one another endpoint
// holds, is refused before the controller is asked or the VF touched.
func TestDeviceID(t *testing.T) {
	h := newHarness(t, plan.KindVeth, plan.KindVF)
	h.ctl.addNetwork("blue", 100)
	vfs := map[string]LocalVF{"0000:7f:00.0": {PF: "eth9", PFDevice: "0000:7f:00.8", Index: 0}, "0000:7f:00.1": {PF: "eth9", PFDevice: "0000:7f:00.8", Index: 1}}
	h.a.vfByPCI = func(_ context.Context, pci string) (LocalVF, error) {
		v, ok := vfs[pci]
		if !ok {
			return LocalVF{}, fmt.Errorf("not a VF of this node: no VF with PCI address %s", pci)
		}
		return v, nil
	}
	ctx := context.Background()
	req := func(name, dev string) localapi.CreateRequest {
		return localapi.CreateRequest{Name: name, Network: "blue", NetNS: h.netns, IfName: "eth0", DeviceID: dev}
	}
	if _, err := h.a.Create(ctx, req("pod-a", "0000:7f:00.1")); err != nil {
		t.Fatal(err)
	}
	got, ok := h.a.current().Local["pod-a"]
	if !ok || got.Kind != plan.KindVF || got.PF != "eth9" || got.VFIndex != 1 {
		t.Fatalf("pod-a in the plan: %+v", got)
	}
	h.dp.Calls()
	for _, tc := range []struct {
		name, dev, code, msg string
	}{
		{"held by pod-a", "0000:7f:00.1", localapi.CodeExists, "deviceID 0000:7f:00.1: VF 1 of eth9 is held by endpoint pod-a"},
		{"unknown", "0000:7f:00.5", localapi.CodeInvalid, "deviceID 0000:7f:00.5: not a VF of this node"},
		{"malformed", "7f:00.1", localapi.CodeInvalid, `deviceID: "7f:00.1" is not a PCI address`},
	} {
		_, err := h.a.Create(ctx, req("pod-b", tc.dev))
		var le *localapi.Error
		if !errors.As(err, &le) || le.Code != tc.code || !strings.Contains(le.Message, tc.msg) {
			t.Errorf("%s: err %v, want code %s saying %q", tc.name, err, tc.code, tc.msg)
		}
	}
	r := req("pod-b", "0000:7f:00.0")
	vf := 0
	r.PF, r.VF = "eth9", &vf
	if _, err := h.a.Create(ctx, r); err == nil || !strings.Contains(err.Error(), "deviceID: give either deviceID or pf and vf") {
		t.Errorf("deviceID with pf and vf: err %v", err)
	}
	for _, c := range h.dp.Calls() {
		if c.Op != "apply" {
			t.Errorf("a refused create reached the datapath: %v", c)
		}
	}
	if _, ok := h.a.current().Local["pod-b"]; ok {
		t.Error("a refused create reached the controller")
	}
}

// TestDeviceIDSoftware: a VF asked of a node whose datapath has no VF
// endpoints is refused, naming the mode; no veth is made instead.
func TestDeviceIDSoftware(t *testing.T) {
	h := newHarness(t, plan.KindVeth)
	h.ctl.addNetwork("blue", 100)
	h.a.vfByPCI = func(context.Context, string) (LocalVF, error) { return LocalVF{PF: "eth9", Index: 0}, nil }
	_, err := h.a.Create(context.Background(), localapi.CreateRequest{Name: "pod-a", Network: "blue", NetNS: h.netns, IfName: "eth0", DeviceID: "0000:7f:00.1"})
	var le *localapi.Error
	if !errors.As(err, &le) || le.Code != localapi.CodeInvalid || !strings.Contains(le.Message, "deviceID 0000:7f:00.1: this node's datapath (mode ") || !strings.Contains(le.Message, "has no VF endpoints") {
		t.Fatalf("err %v, want a refusal naming the deviceID and the mode", err)
	}
	for _, c := range h.dp.Calls() {
		if c.Op != "apply" {
			t.Errorf("a refused create reached the datapath: %v", c)
		}
	}
	if _, ok := h.a.current().Local["pod-a"]; ok {
		t.Error("a refused create reached the controller")
	}
}
