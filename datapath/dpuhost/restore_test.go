package dpuhost

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// A reset of the PF (a DPU reboot) destroys the VF netdev in the pod and
// makes a new one in the host: the next Apply, even of an agent started
// after the reset (the placement is in the state file), moves it back into
// the pod with the endpoint's settings; an Apply with everything in place
// writes nothing; a pod whose namespace is gone is forgotten once its
// endpoint has left the plan.
func TestApplyMovesRecreatedVFBack(t *testing.T) {
	testkit.Require(t)
	host, pod := testkit.New(t), testkit.New(t)
	gone := "skt-g" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", gone).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", gone, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", gone).Run() })
	testkit.Run(t, host, "ip", "link", "add", "vf0", "type", "veth", "peer", "name", "rep0")
	testkit.Run(t, host, "ip", "link", "add", "vf1", "type", "veth", "peer", "name", "rep1")
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "vf0"}, {PF: "0000:03:00.0", Index: 1, Netdev: "vf1"}}}
	state := filepath.Join(t.TempDir(), "dpuhost-vfs.json")
	o := Options{VFs: tab, HostNS: testkit.Path(host), StateFile: state}
	d := mustNew(t, o)
	netw, a, b := podNet, podVF("pod-a", 0), podVF("pod-b", 1)
	ctx := context.Background()
	if _, err := d.Plumb(ctx, datapath.PlumbRequest{Endpoint: a, Network: netw, NetNS: testkit.Path(pod), IfName: "eth0", MTU: 1300}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Plumb(ctx, datapath.PlumbRequest{Endpoint: b, Network: netw, NetNS: testkit.Path(gone), IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	p := plan.New("h1")
	p.Networks["blue"] = netw
	p.Local["pod-a"], p.Local["pod-b"] = a, b
	w := d.Writes()
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if d.Writes() != w {
		t.Errorf("an Apply with every VF in its pod wrote %d times", d.Writes()-w)
	}
	if d.WantsLink("vf0") != true || d.WantsLink("rep0") {
		t.Error("WantsLink: want vf0 only")
	}

	// The reset: the VFs are destroyed wherever they are, and new ones
	// appear in the host. The agent restarts across it.
	testkit.Run(t, pod, "ip", "link", "del", "eth0")
	if out, err := exec.Command("ip", "netns", "del", gone).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", gone, err, out)
	}
	testkit.Run(t, host, "ip", "link", "add", "vf0", "type", "veth", "peer", "name", "rep0")
	d = mustNew(t, o)
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	got := testkit.Run(t, pod, "ip", "-o", "addr", "show", "dev", "eth0") + testkit.Run(t, pod, "ip", "-o", "link", "show", "eth0") +
		testkit.Run(t, pod, "ip", "route", "show", "default")
	for _, want := range []string{"198.51.100.10/24", "02:00:00:00:00:0a", "mtu 1300", "skiff:dpuvf ep=pod-a home=vf0", "default via 198.51.100.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("the re-created VF in the pod lacks %q:\n%s", want, got)
		}
	}
	w = d.Writes()
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if d.Writes() != w {
		t.Errorf("an Apply after the move wrote %d times", d.Writes()-w)
	}
	// pod-b's namespace is gone: kept while its endpoint is in the plan
	// (its CNI DEL is coming), forgotten once it is not.
	delete(p.Local, "pod-b")
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.ReadFile(state); strings.Contains(string(st), "pod-b") || !strings.Contains(string(st), "pod-a") {
		t.Errorf("state file after pod-b's namespace and endpoint went: %s", st)
	}
	// Unplumb forgets it.
	if err := d.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: a, NetNS: testkit.Path(pod), IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.ReadFile(state); strings.Contains(string(st), "pod-a") {
		t.Errorf("state file after Unplumb: %s", st)
	}
}

// A VF that is not back in the host yet is an error naming the endpoint;
// Apply moves it in once it appears.
func TestApplyWaitsForRecreatedVF(t *testing.T) {
	testkit.Require(t)
	host, pod := testkit.New(t), testkit.New(t)
	testkit.Run(t, host, "ip", "link", "add", "vf0", "type", "veth", "peer", "name", "rep0")
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "vf0"}}}
	d := mustNew(t, Options{VFs: tab, HostNS: testkit.Path(host)})
	ep := podVF("pod-a", 0)
	p := plan.New("h1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1400}
	p.Local["pod-a"] = ep
	if _, err := d.Plumb(context.Background(), datapath.PlumbRequest{Endpoint: ep, Network: p.Networks["blue"], NetNS: testkit.Path(pod), IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, pod, "ip", "link", "del", "eth0")
	if err := d.Apply(p); err == nil || !strings.Contains(err.Error(), "endpoint pod-a lost its VF") {
		t.Fatalf("Apply with the VF not back: %v", err)
	}
	testkit.Run(t, host, "ip", "link", "add", "vf0", "type", "veth", "peer", "name", "rep0")
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, pod, "ip", "link", "show", "eth0")
}

// A state file that cannot be used is refused, naming the file and what
// is wrong.
func TestNewRefusesBadState(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ body, want string }{
		"garbage": {"{not json", "invalid character"},
		"version": {`{"version":7,"vfs":{}}`, "version: 7 is not 1"},
		"missing": {`{"version":1,"vfs":{"pod-a":{"netns":"/var/run/netns/x"}}}`, "vfs[pod-a]: netns, ifName and home are required"},
	} {
		f := filepath.Join(dir, name+".json")
		if err := os.WriteFile(f, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(Options{VFs: &vftable.Table{}, StateFile: f})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: %v, want %q and the file's name", name, err, c.want)
		}
	}
}

// A save torn by a crash (the host loses power while the state is being
// written) leaves its temporary file in the directory, whole, in part or
// empty, never renamed: the next agent reads the state saved before,
// whole, and its saves go on beside what the crash left.
func TestStateSurvivesTornSave(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	state := filepath.Join(dir, "dpuhost-vfs.json")
	o := Options{VFs: &vftable.Table{}, StateFile: state}
	a := placement{NetNS: "/var/run/netns/pod-a", IfName: "eth0", MTU: 1300, Home: "vf0"}
	b := placement{NetNS: "/var/run/netns/pod-b", IfName: "net1", Home: "vf1"}
	if err := mustNew(t, o).placed("pod-a", a); err != nil {
		t.Fatal(err)
	}
	// The save of pod-b that the crash tore, its temporary files named
	// as atomicfile names them.
	next, err := json.Marshal(stateFile{Version: stateVersion, VFs: map[string]placement{"pod-a": a, "pod-b": b}})
	if err != nil {
		t.Fatal(err)
	}
	for i, left := range [][]byte{next, next[:len(next)/2], nil} {
		if err := os.WriteFile(filepath.Join(dir, "dpuhost-vfs.json."+strconv.Itoa(1000+i)), left, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := mustNew(t, o)
	if got, err := loadPlacements(state); err != nil || !maps.Equal(got, map[string]placement{"pod-a": a}) {
		t.Fatalf("state after the torn save: %v (%v), want pod-a's only", got, err)
	}
	if !d.WantsLink("vf0") || d.WantsLink("vf1") {
		t.Error("WantsLink after the torn save: want vf0 only")
	}
	if err := d.placed("pod-b", b); err != nil {
		t.Fatal(err)
	}
	if got, err := loadPlacements(state); err != nil || !maps.Equal(got, map[string]placement{"pod-a": a, "pod-b": b}) {
		t.Fatalf("state after the next save: %v (%v), want pod-a's and pod-b's", got, err)
	}
	if st, err := os.Stat(state); err != nil {
		t.Error(err)
	} else if st.Mode() != 0o600 {
		t.Errorf("state file: mode %v, want 0600", st.Mode())
	}
	if d := mustNew(t, o); !d.WantsLink("vf0") || !d.WantsLink("vf1") {
		t.Error("WantsLink of an agent started after the next save: want vf0 and vf1")
	}
}
