package nltest_test

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

func TestSetTable(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	ns.AddForeignTable(nl.NftTable{Name: "kube-proxy", Chains: []nl.NftChain{{Name: "c", Rules: []nl.NftRule{{Tag: "theirs", Counter: true, Action: nl.Accept{}}}}}})
	bad := nftTable()
	bad.Chains[2].Rules[0].Action = nl.Jump{Chain: "forward"} // a base chain
	masq := nftTable()
	masq.Chains[0].Rules[0].Action = nl.Masquerade{}
	for _, c := range []struct {
		what   string
		t      nl.NftTable
		want   nl.NftChange
		err    bool
		writes int
	}{
		{"create", nftTable("10.1.0.5"), nl.NftChange{Rewritten: true}, false, 1},
		{"again", nftTable("10.1.0.5"), nl.NftChange{}, false, 0},
		{"elements", nftTable("10.1.0.6", "10.1.0.7", "2001:db8::1"), nl.NftChange{Elements: 3}, false, 1},
		{"jump to a base chain", bad, nl.NftChange{}, true, 0},
		{"masquerade in a filter chain", masq, nl.NftChange{}, true, 0},
		{"delete", nl.NftTable{Name: "sktest"}, nl.NftChange{Rewritten: true}, false, 1},
		{"delete absent", nl.NftTable{Name: "sktest"}, nl.NftChange{}, false, 0},
		{"again after", nftTable("10.1.0.5"), nl.NftChange{Rewritten: true}, false, 1},
	} {
		before := k.Writes()
		got, err := k.SetTable(c.t)
		if got != c.want || (err != nil) != c.err || k.Writes()-before != c.writes {
			t.Errorf("%s: %+v, %v, %d writes; want %+v, error %v, %d writes", c.what, got, err, k.Writes()-before, c.want, c.err, c.writes)
		}
	}
	if names, _ := k.Tables(nl.NftInet); !slices.Equal(names, []string{"kube-proxy", "sktest"}) {
		t.Errorf("tables %v", names)
	}
	ns.SetRuleCounter("sktest", "forward", "isolate", 3, 300)
	cs, _ := k.TableCounters(nl.NftInet, "sktest")
	want := []nl.NftCounter{{Chain: "forward", Tag: "isolate", Packets: 3, Bytes: 300}, {Chain: "forward", Tag: "pods"}, {Chain: "nat", Tag: "snat"}}
	if !slices.Equal(cs, want) {
		t.Errorf("counters %+v, want %+v", cs, want)
	}
	if cs, _ := k.TableCounters(nl.NftInet, "kube-proxy"); len(cs) != 0 {
		t.Errorf("counters of someone else's rules: %+v", cs)
	}
	if _, err := k.SetTable(nftTable("10.1.0.9")); err != nil {
		t.Fatal(err)
	}
	if cs, _ := k.TableCounters(nl.NftInet, "sktest"); cs[0].Packets != 3 {
		t.Errorf("an element sync reset the counters: %+v", cs)
	}
	changed := nftTable("10.1.0.9")
	changed.Chains[1].Rules = changed.Chains[1].Rules[:1]
	if c, _ := k.SetTable(changed); !c.Rewritten {
		t.Errorf("a rule less: %+v, want rewritten", c)
	}
	if cs, _ := k.TableCounters(nl.NftInet, "sktest"); cs[0].Packets != 0 {
		t.Errorf("a rewrite kept the counters: %+v", cs)
	}
	if names, _ := k.Tables(nl.NftInet); !slices.Equal(names, []string{"kube-proxy", "sktest"}) {
		t.Errorf("tables %v after rewrites", names)
	}
}

func TestSysctl(t *testing.T) {
	w := nltest.New()
	w.AddNS("/pod")
	k, pod := open(t, w, ""), open(t, w, "/pod")
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1"}))
	get := func(k nl.Kernel, name string) string {
		v, err := k.Sysctl(name)
		if err != nil {
			return err.Error()
		}
		return v
	}
	for _, name := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/p0/forwarding", "net/ipv6/conf/p1/forwarding"} {
		if v := get(k, name); v != "0" {
			t.Errorf("%s = %q, want 0", name, v)
		}
	}
	must(t, k.SetSysctl("net/ipv4/ip_forward", "1"))
	must(t, k.SetSysctl("net/ipv6/conf/all/forwarding", "1"))
	must(t, k.SetSysctl("net/ipv4/conf/p1/forwarding", "0"))
	must(t, k.AddBridge(nl.Bridge{Name: "br0"}))
	for name, want := range map[string]string{"net/ipv4/conf/p0/forwarding": "1", "net/ipv4/conf/p1/forwarding": "0", "net/ipv6/conf/p1/forwarding": "1",
		"net/ipv4/conf/br0/forwarding": "1", "net/ipv6/conf/default/forwarding": "1", "net/ipv4/conf/all/forwarding": "1"} {
		if v := get(k, name); v != want {
			t.Errorf("%s = %q, want %s", name, v, want)
		}
	}
	if v := get(pod, "net/ipv4/ip_forward"); v != "0" {
		t.Errorf("the pod's ip_forward %q: namespaces have their own", v)
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"missing", func() error { _, err := k.Sysctl("net/ipv4/nosuch"); return err }(), fs.ErrNotExist},
		{"missing link", func() error { _, err := k.Sysctl("net/ipv4/conf/nosuch/forwarding"); return err }(), fs.ErrNotExist},
		{"set missing", k.SetSysctl("net/ipv4/nosuch", "1"), fs.ErrNotExist},
		{"not a number", k.SetSysctl("net/ipv4/ip_forward", "yes"), unix.EINVAL},
		{"bridge-nf before br_netfilter", func() error { _, err := k.Sysctl("net/bridge/bridge-nf-call-iptables"); return err }(), fs.ErrNotExist},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if _, err := k.Sysctl("../../etc/passwd"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a name out of /proc/sys: %v", err)
	}
	before := k.Writes()
	must(t, k.LoadModule("br_netfilter"))
	must(t, pod.LoadModule("br_netfilter"))
	if k.Writes() != before+1 || !slices.Equal(w.Modules(), []string{"br_netfilter"}) {
		t.Errorf("modules %v, %d writes", w.Modules(), k.Writes()-before)
	}
	if v := get(pod, "net/bridge/bridge-nf-call-iptables"); v != "1" {
		t.Errorf("bridge-nf-call-iptables in the pod %q, want 1", v)
	}
	must(t, k.SetSysctl("net/bridge/bridge-nf-call-ip6tables", "5"))
	if v := get(k, "net/bridge/bridge-nf-call-ip6tables"); v != "1" {
		t.Errorf("bridge-nf-call-ip6tables %q, want 1", v)
	}
	w.NS("").DefineSysctl("net/ipv4/conf/p0/rp_filter", "2")
	must(t, k.SetSysctl("net/ipv4/conf/p0/rp_filter", "0"))
	if v := get(k, "net/ipv4/conf/p0/rp_filter"); v != "0" {
		t.Errorf("a defined sysctl: %q", v)
	}
}

func TestDevices(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	ns.AddDevlink("pci", "0000:03:00.0", "legacy")
	ns.AddDevlink("pci", "0000:04:00.0", "")
	ns.AddDevice(nltest.Device{Name: "enp3s0f0", VFs: 2, SwitchID: "1a2b"})
	if m, err := k.EswitchMode("pci", "0000:03:00.0"); m != "legacy" || err != nil {
		t.Errorf("mode %q, %v", m, err)
	}
	must(t, k.SetEswitchMode("pci", "0000:03:00.0", "switchdev"))
	if m, _ := k.EswitchMode("pci", "0000:03:00.0"); m != "switchdev" {
		t.Errorf("mode %q after setting switchdev", m)
	}
	if m, err := k.EswitchMode("pci", "0000:04:00.0"); m != "" || err != nil {
		t.Errorf("a device without an eswitch: %q, %v", m, err)
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"missing", func() error { _, err := k.EswitchMode("pci", "x"); return err }(), unix.ENODEV},
		{"set missing", k.SetEswitchMode("pci", "x", "legacy"), unix.ENODEV},
		{"bad mode", k.SetEswitchMode("pci", "0000:03:00.0", "nonsense"), unix.EINVAL},
		{"no eswitch", k.SetEswitchMode("pci", "0000:04:00.0", "legacy"), unix.EOPNOTSUPP},
		{"missing vf", k.SetVFTrust("enp3s0f0", 2, true), unix.EINVAL},
		{"bad vlan", k.SetVFVlanQos("enp3s0f0", 0, 5000, 0), unix.EINVAL},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if _, err := k.VFs("nope"); err == nil {
		t.Error("VFs of a missing PF")
	}
	mac := []byte{2, 0, 0, 0, 1, 0}
	must(t, k.SetVFMAC("enp3s0f0", 1, mac))
	must(t, k.SetVFVlanQos("enp3s0f0", 1, 10, 3))
	must(t, k.SetVFSpoofCheck("enp3s0f0", 1, true))
	must(t, k.SetVFTrust("enp3s0f0", 1, true))
	must(t, k.SetVFLinkState("enp3s0f0", 1, unix.IFLA_VF_LINK_STATE_ENABLE))
	must(t, k.SetVFRate("enp3s0f0", 1, 10, 100))
	vfs, _ := k.VFs("enp3s0f0")
	if len(vfs) != 2 || vfs[0].Spoofchk || vfs[1].Mac.String() != "02:00:00:00:01:00" || vfs[1].Vlan != 10 || vfs[1].Qos != 3 ||
		!vfs[1].Spoofchk || vfs[1].Trust != 1 || vfs[1].LinkState != unix.IFLA_VF_LINK_STATE_ENABLE || vfs[1].MaxTxRate != 100 {
		t.Errorf("VFs %+v", vfs)
	}
	if l, _ := k.LinkByName("enp3s0f0"); l.SwitchID != "1a2b" || l.Kind != "device" {
		t.Errorf("the PF %+v", l)
	}
}

func TestLearn(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	learn := nl.NftTable{Family: nl.NftBridge, Name: "sktest",
		Sets: []nl.NftSet{{Name: "seen", Key: nl.SetKeyIfNameEther, Timeout: time.Hour, Size: 2}, {Name: "brief", Key: nl.SetKeyIfNameEther, Timeout: 20 * time.Millisecond}},
		Chains: []nl.NftChain{{Name: "forward", Hook: nl.HookForward, Type: nl.ChainFilter, Rules: []nl.NftRule{
			{Tag: "learn", Match: []nl.NftMatch{nl.IfName{Out: true, Name: "skvx"}, nl.EtherUnicast{}}, Action: nl.LearnPair{Set: "seen"}},
			{Tag: "brief", Match: []nl.NftMatch{nl.IfName{Out: true, Name: "skvx"}, nl.EtherUnicast{}}, Action: nl.LearnPair{Set: "brief"}},
		}}}}
	for _, tb := range []nl.NftTable{nftTable("10.1.0.5"), learn} {
		if c, err := k.SetTable(tb); err != nil || !c.Rewritten {
			t.Fatalf("%s %s: %+v, %v", tb.Family, tb.Name, c, err)
		}
	}
	inet, _ := k.Tables(nl.NftInet)
	bridge, _ := k.Tables(nl.NftBridge)
	if !slices.Equal(inet, []string{"sktest"}) || !slices.Equal(bridge, []string{"sktest"}) {
		t.Errorf("tables inet %v bridge %v", inet, bridge)
	}
	ns.Learn(nl.NftBridge, "sktest", "seen", "skp0", "02:00:00:00:AA:01")
	ns.Learn(nl.NftBridge, "sktest", "seen", "skp0", "02:00:00:00:aa:01") // updated
	ns.Learn(nl.NftBridge, "sktest", "seen", "skp1", "02:00:00:00:aa:01")
	ns.Learn(nl.NftBridge, "sktest", "seen", "skp1", "02:00:00:00:aa:02") // full
	ns.Learn(nl.NftBridge, "sktest", "brief", "skp1", "02:00:00:00:aa:02")
	es, err := k.SetElements(nl.NftBridge, "sktest", "seen")
	if err != nil || len(es) != 2 || es[0].IfName != "skp0" || es[0].MAC != "02:00:00:00:aa:01" || es[1].IfName != "skp1" ||
		es[0].Expires <= 59*time.Minute || es[0].Expires > time.Hour {
		t.Errorf("elements %+v, %v", es, err)
	}
	before := k.Writes()
	if c, err := k.SetTable(learn); err != nil || c != (nl.NftChange{}) || k.Writes() != before {
		t.Errorf("again with learned elements: %+v, %v, %d writes", c, err, k.Writes()-before)
	}
	if es, _ := k.SetElements(nl.NftBridge, "sktest", "seen"); len(es) != 2 {
		t.Errorf("SetTable dropped learned elements: %+v", es)
	}
	if !strings.Contains(ns.State(), "table bridge sktest\n  set seen ifname . ether_addr; flags dynamic,timeout; timeout 3600000ms; size 2\n    skp0 . 02:00:00:00:aa:01\n") {
		t.Errorf("state:\n%s", ns.State())
	}
	time.Sleep(30 * time.Millisecond)
	if es, _ := k.SetElements(nl.NftBridge, "sktest", "brief"); len(es) != 0 {
		t.Errorf("elements past their timeout: %+v", es)
	}
	if n, err := k.DeleteSetElements(nl.NftBridge, "sktest", "seen", []nl.NftElement{{IfName: "skp0", MAC: "02:00:00:00:aa:01"}, {IfName: "skp0", MAC: "02:00:00:00:aa:09"}}); n != 1 || err != nil {
		t.Errorf("delete: %d, %v", n, err)
	}
	if es, _ := k.SetElements(nl.NftInet, "sktest", "pods4"); len(es) != 1 || es[0].Addr.String() != "10.1.0.5" {
		t.Errorf("inet elements %+v", es)
	}
	if c, err := k.SetTable(nl.NftTable{Family: nl.NftBridge, Name: "sktest"}); err != nil || !c.Rewritten {
		t.Errorf("delete bridge table: %+v, %v", c, err)
	}
	if inet, _ := k.Tables(nl.NftInet); !slices.Equal(inet, []string{"sktest"}) {
		t.Errorf("deleting the bridge table took the inet one: %v", inet)
	}
	if _, err := k.SetTable(nl.NftTable{Family: 9, Name: "x", Chains: []nl.NftChain{{Name: "c"}}}); err == nil {
		t.Error("an unknown family: no error")
	}
}
