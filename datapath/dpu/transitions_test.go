package dpu

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/datapath/software"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
)

// The dpu datapath's state transitions on the kernel fake (no root), as
// DPU d1 (underlay 192.0.2.11) serving host h1, whose endpoints are VFs
// of its PF 0000:03:00.0: wrapping the software datapath (a bench: the
// representors are devices a vftable.Table names) and, separately, the
// offload datapath (a BlueField's Arm side: pf0vfN with the port name
// c1pf0vfN and a switch id, found through eswitch discovery of a sysfs
// tree, the eswitch in switchdev mode, the VXLAN device offloaded). The
// same plans in order: v0's representor adopted (renamed to its host
// interface name, marked) and attached (a bridge port, or its flower
// rules), v9 (no representor) and x (not a VF) refused with the reason;
// v1 adopted too; v0 gone, its representor given back (name, no alias,
// no master, no rules); everything gone. The DPU's exact state after
// each, a second Apply writing nothing, someone else's objects
// untouched.

// expect is nltest.Expect of parts that name the adopted representors
// HV0 and HV1 (v0's and v1's host interface names).
func expect(parts ...string) string {
	hosts := strings.NewReplacer("HV0", datapath.HostIfName("v0"), "HV1", datapath.HostIfName("v1"))
	for i := range parts {
		parts[i] = hosts.Replace(parts[i])
	}
	return nltest.Expect(parts...)
}

var (
	dpuBlue = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
		Subnets: []plan.Subnet{{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
)

// hostVF is host h1's endpoint on VF index of its PF.
func hostVF(name string, index int, mac, ip string) plan.Endpoint {
	return plan.Endpoint{Name: name, Network: "blue", Node: "h1", Kind: plan.KindVF, PF: "0000:03:00.0", VFIndex: index, MAC: mac,
		IPs: []netip.Prefix{netip.MustParsePrefix(ip)}}
}

var (
	v0, v1, v9 = hostVF("v0", 0, "02:00:00:00:00:10", "198.51.100.10/24"), hostVF("v1", 1, "02:00:00:00:00:11", "198.51.100.11/24"),
		hostVF("v9", 9, "02:00:00:00:00:19", "198.51.100.19/24")
	// x is a veth of the host's: a host's endpoint needs a VF.
	x = plan.Endpoint{Name: "x", Network: "blue", Node: "h1", Kind: plan.KindVeth, MAC: "02:00:00:00:00:12", VFIndex: -1,
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.12/24")}}
)

// dpuPlan is d1's plan: blue with the remote endpoint r behind
// 192.0.2.2 and the host's endpoints, or nothing.
func dpuPlan(host ...plan.Endpoint) plan.Plan {
	p := plan.New("d1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.11")
	if len(host) == 0 {
		return p
	}
	p.Networks["blue"] = dpuBlue
	p.Remote["r"] = plan.Remote{Name: "r", Network: "blue", Node: "n2", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.5/24")}}
	for _, e := range host {
		p.Local[e.Name] = e
	}
	return p
}

// dpuSteps are the plans of both tables in order, with the states each
// wants: an empty plan; v0 adopted, v9 and x refused; v1 adopted too;
// v0 gone; everything gone.
func dpuSteps(dp *Datapath, empty, adopted, both, v1Alone, gone string) []nltest.Step {
	apply := func(p plan.Plan) func() error { return func() error { return dp.Apply(p) } }
	refused := func(t *testing.T) {
		t.Helper()
		for ep, why := range map[string]string{
			"v9": "no representor for VF 9 of PF 0000:03:00.0 on DPU d1: ",
			"x":  `endpoint x of kind "veth": a host's endpoint needs a VF (its PF and VF index)`,
		} {
			if ok, got := dp.Ready(ep); ok || !strings.HasPrefix(got, why) || dp.Refused(ep) != got {
				t.Errorf("%s: ready %v, %q (refused %q); want refused: %q", ep, ok, got, dp.Refused(ep), why)
			}
		}
	}
	ready := func(eps ...string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			refused(t)
			for _, ep := range eps {
				if ok, why := dp.Ready(ep); !ok {
					t.Errorf("%s not ready: %s", ep, why)
				}
			}
		}
	}
	return []nltest.Step{
		{Name: "empty plan", Apply: apply(dpuPlan()), Want: empty, Writes: 0},
		{Name: "v0 adopted and attached, v9 (no representor) and x (not a VF) refused", Apply: apply(dpuPlan(v0, v9, x)),
			Want: adopted, Writes: nltest.AnyWrites, After: ready("v0")},
		{Name: "v1 adopted and attached too", Apply: apply(dpuPlan(v0, v1, v9, x)), Want: both, Writes: nltest.AnyWrites, After: ready("v0", "v1")},
		{Name: "v0 gone: its representor given back", Apply: apply(dpuPlan(v1, v9, x)), Want: v1Alone, Writes: nltest.AnyWrites, After: ready("v1")},
		{Name: "everything gone: v1's representor given back, nothing of Skiff's left", Apply: apply(dpuPlan()), Want: gone, Writes: nltest.AnyWrites},
	}
}

// fakeDPU is a fake DPU's namespace with someone else's nftables table
// and the kernel's handles of the wrapped datapath and of the dpu
// datapath.
func fakeDPU(t *testing.T) (w *nltest.World, inner, own nl.Kernel) {
	t.Helper()
	w = nltest.New()
	w.NS("").AddForeignTable(nltest.ForeignTable())
	return w, w.MustOpen(t, ""), w.MustOpen(t, "")
}

// isolated are the isolation rules (table inet skiff) of a network whose
// egress is none, on the device of the node's stack that stands for it
// (the software datapath's bridge, the offload datapath's gateway):
// nothing routed into another network, out, or in.
func isolated(dev string) string {
	return strings.ReplaceAll(`table inet skiff
  chain isolate type filter hook forward priority 0; policy accept;
    iifname "DEV" oifname "skb*" oifname != "DEV" drop  # x:DEV>skb!DEV
    iifname "DEV" oifname "skn*" oifname != "DEV" drop  # x:DEV>skn!DEV
    iifname "DEV" oifname "skg*" oifname != "DEV" drop  # x:DEV>skg!DEV
    iifname "DEV" oifname != "skb*" oifname != "skn*" oifname != "skg*" drop  # none:DEV
    iifname != "skb*" iifname != "skn*" iifname != "skg*" oifname "DEV" drop  # in:DEV`, "DEV", dev)
}

// On a bench: the representors rep0 and rep1 of VFs 0 and 1 (a
// vftable.Table), rep9 someone else's; the software datapath's bridge.
func TestTransitionsSoftwareFake(t *testing.T) {
	w, inner, own := fakeDPU(t)
	ns := w.NS("")
	ns.AddDevice(nltest.Device{Name: "rep0", Up: true})
	ns.AddDevice(nltest.Device{Name: "rep1"})
	ns.AddDevice(nltest.Device{Name: "rep9", Up: true})
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "rep0"}, {PF: "0000:03:00.0", Index: 1, Netdev: "rep1"}}}
	log := slog.New(slog.DiscardHandler)
	dp := New(Options{Node: "d1", Inner: software.New(software.Options{Kernel: inner, Open: w.Open, Logger: log}), Kernel: own, Representors: tab, Logger: log})
	t.Cleanup(dp.Close)
	const (
		foreign = nltest.ForeignTableState + `
link lo device mtu 65536 up
link rep9 device mtu 1500 up`
		// blue's bridge and VXLAN device, r behind 192.0.2.2, the
		// bridge answering ARP for the plan's local endpoints (v9's
		// and x's too).
		blue = `link skb100 bridge mtu 1450 up mac 02:73:6b:00:00:64 alias skiff:bridge:blue
link skv100 vxlan mtu 1450 up alias skiff:vxlan:blue vni 100 local 192.0.2.11 dstport 4789 master skb100 learning off neigh_suppress on hairpin off
addr skb100 198.51.100.1/24
fdb skv100 00:00:00:00:00:00 dst 192.0.2.2 self permanent
fdb skv100 02:00:00:00:00:01 dst 192.0.2.2 self permanent
fdb skv100 02:00:00:00:00:01 master static
neigh skb100 198.51.100.5 lladdr 02:00:00:00:00:01
neigh skb100 198.51.100.12 lladdr 02:00:00:00:00:12
neigh skb100 198.51.100.19 lladdr 02:00:00:00:00:19`
		// Adopted: renamed, marked, a port of the bridge, up.
		adopted0 = `link HV0 device mtu 1500 up alias skiff:rep ep=v0 home=rep0 master skb100 learning on neigh_suppress on hairpin off
neigh skb100 198.51.100.10 lladdr 02:00:00:00:00:10`
		adopted1 = `link HV1 device mtu 1500 up alias skiff:rep ep=v1 home=rep1 master skb100 learning on neigh_suppress on hairpin off
neigh skb100 198.51.100.11 lladdr 02:00:00:00:00:11`
		// Given back: its name, no alias, no master (down: renamed).
		back0 = "link rep0 device mtu 1500 down"
		back1 = "link rep1 device mtu 1500 down"
	)
	nltest.Table{NS: ns, Writes: dp.Writes}.Run(t, dpuSteps(dp, expect(foreign, "link rep0 device mtu 1500 up", back1),
		expect(foreign, blue, isolated("skb100"), adopted0, back1),
		expect(foreign, blue, isolated("skb100"), adopted0, adopted1),
		expect(foreign, blue, isolated("skb100"), back0, adopted1),
		expect(foreign, back0, back1)))
}

// On a BlueField's Arm side: the PF 0000:03:00.0 (the host's PF's
// function 0: pf0) in switchdev mode, its uplink p0 holding the DPU's
// address, the host PF's representor pf0hpf with someone else's filter,
// the host's VFs' representors pf0vf0 and pf0vf1 (port names c1pf0vf0,
// c1pf0vf1); the offload datapath's flower rules on the adopted
// representors, in hardware, and on the offloaded VXLAN device.
func TestTransitionsOffloadFake(t *testing.T) {
	w, inner, own := fakeDPU(t)
	ns := w.NS("")
	const sw = "b8cef60300a0b1c2"
	tr := sysfstest.New(t)
	pf := tr.PCIDev("0000:03:00.0", "mlx5_core")
	tr.Write(pf+"/sriov_totalvfs", "0")
	tr.Write(pf+"/sriov_numvfs", "0")
	for _, n := range []struct{ name, port string }{{"p0", "p0"}, {"pf0hpf", "pf0hpf"}, {"pf0vf0", "c1pf0vf0"}, {"pf0vf1", "c1pf0vf1"}} {
		tr.Netdev(pf, n.name, sw, n.port)
		ns.AddDevice(nltest.Device{Name: n.name, SwitchID: sw, Up: n.name == "p0" || n.name == "pf0hpf"})
	}
	ns.AddDevlink("pci", "0000:03:00.0", "switchdev")
	ns.OffloadTunnels(true)
	p0, _ := ns.Link("p0")
	if err := own.AddAddr(p0.Index, netip.MustParsePrefix("192.0.2.11/24")); err != nil {
		t.Fatal(err)
	}
	ns.AddForeignFilter("pf0hpf", tc.Filter{Prio: 21249, Proto: unix.ETH_P_ALL, Kind: "flower", Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT}}})
	log := slog.New(slog.DiscardHandler)
	disc := eswitch.New(eswitch.Options{SysRoot: tr.Root, Devlink: eswitch.NetlinkDevlink{Kernel: own}})
	off, err := offload.New(offload.Options{Kernel: inner, Open: w.Open, Logger: log, Eswitch: disc, SysRoot: tr.Root, TunnelHardware: true,
		Representor: func(e plan.Endpoint) (offload.Port, bool) {
			rep, wire := Port(nil, e)
			return offload.Port{Rep: rep, Target: wire}, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	dp := New(Options{Node: "d1", Inner: off, Kernel: own, Representors: EswitchRepresentors{Discoverer: disc}, Logger: log})
	t.Cleanup(dp.Close)
	foreign := nltest.ForeignTableState + `
link lo device mtu 65536 up
link p0 device mtu 1500 up switchid ` + sw + ` hw-tc
link pf0hpf device mtu 1500 up switchid ` + sw + ` hw-tc
addr p0 192.0.2.11/24
qdisc pf0hpf clsact
filter pf0hpf ingress chain 0 prio 21249 protocol all handle 0x1 flower in_hw action gact drop
devlink pci/0000:03:00.0 eswitch switchdev`
	rep := func(name, state string) string {
		return "link " + name + " device mtu 1500 " + state + " switchid " + sw + " hw-tc"
	}
	adopted := func(ep, home string) string {
		return "link " + datapath.HostIfName(ep) + " device mtu 1500 up alias skiff:rep ep=" + ep + " home=" + home + " switchid " + sw + " hw-tc" + bridgePort
	}
	nltest.Table{NS: ns, Writes: dp.Writes, Show: nltest.ShortCookies}.Run(t, dpuSteps(dp, expect(foreign, rep("pf0vf0", "down"), rep("pf0vf1", "down")),
		expect(foreign, dpuGateway, isolated("skg100"), adopted("v0", "pf0vf0"), rep("pf0vf1", "down"), rulesV0, replicated("HV0")),
		expect(foreign, dpuGateway, isolated("skg100"), adopted("v0", "pf0vf0"), adopted("v1", "pf0vf1"), rulesBoth, replicated("HV0", "HV1")),
		expect(foreign, dpuGateway, isolated("skg100"), rep("pf0vf0", "down"), "qdisc pf0vf0 clsact", adopted("v1", "pf0vf1"), rulesV1, replicated("HV1")),
		expect(foreign, rep("pf0vf0", "down"), rep("pf0vf1", "down"), "qdisc pf0vf0 clsact\nqdisc pf0vf1 clsact")))
}
