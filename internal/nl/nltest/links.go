package nltest

import (
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The link calls of a handle, as the real one makes them (links.go of
// internal/nl) and the kernel answers them.

func (k *kernel) Links() ([]nl.Link, error) {
	var out []nl.Link
	err := k.do(func(n *NS) error {
		for _, l := range n.sorted() {
			out = append(out, l.view())
		}
		return nil
	})
	return out, err
}

func (k *kernel) LinkByName(name string) (nl.Link, error) {
	var out nl.Link
	err := k.do(func(n *NS) error {
		l := n.byName(name)
		if l == nil {
			return fmt.Errorf("nl: %s in %s: %w", name, where(n.path), nl.ErrNoLink)
		}
		out = l.view()
		return nil
	})
	return out, err
}

// checkNew refuses a name the kernel would refuse for a new link of n,
// and an MTU out of range.
func checkNew(n *NS, name string, mtu int) error {
	if !validName(name) {
		return unix.EINVAL
	}
	if n.byName(name) != nil {
		return unix.EEXIST
	}
	if mtu != 0 && (mtu < 68 || mtu > 65535) {
		return unix.EINVAL
	}
	return nil
}

// create makes a link of kind with name and MTU (0: 1500) in n, marked
// with alias (a write of its own, as the real handle's).
func (k *kernel) create(n *NS, name, kind string, mtu int, alias string) *link {
	l := n.newLink(name, kind)
	if mtu > 0 {
		l.MTU = mtu
	}
	n.place(l)
	k.mark(n, l, alias)
	return l
}

func (k *kernel) mark(n *NS, l *link, alias string) {
	if alias == "" {
		return
	}
	k.write()
	l.Alias = alias
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
}

func (k *kernel) AddBridge(b nl.Bridge) error {
	k.write()
	return k.do(func(n *NS) error {
		if err := checkNew(n, b.Name, b.MTU); err != nil {
			return fmt.Errorf("nl: add bridge %s: %w", b.Name, err)
		}
		l := n.newLink(b.Name, "bridge")
		l.vlanOn = b.VLANFiltering
		if b.MTU > 0 {
			l.MTU = b.MTU
		}
		mac := l.MAC
		l.MAC = zeroMAC
		n.bridgeMAC(l, mac)
		n.place(l)
		k.mark(n, l, b.Alias)
		return nil
	})
}

func (k *kernel) AddVLAN(v nl.VLAN) error {
	k.write()
	return k.do(func(n *NS) error {
		err := checkNew(n, v.Name, 0)
		parent := n.links[v.Parent]
		switch {
		case err != nil:
		case parent == nil:
			err = unix.ENODEV
		case v.VID == 0 || v.VID > 4094:
			err = unix.ERANGE
		}
		for _, o := range n.links {
			if err == nil && o.Kind == "vlan" && o.Parent == v.Parent && o.VID == v.VID {
				err = unix.EEXIST
			}
		}
		if err != nil {
			return fmt.Errorf("nl: add vlan %s (id %d on %d): %w", v.Name, v.VID, v.Parent, err)
		}
		l := n.newLink(v.Name, "vlan")
		l.VID, l.Parent, l.MTU, l.MAC = v.VID, v.Parent, parent.MTU, parent.MAC
		n.place(l)
		k.mark(n, l, v.Alias)
		return nil
	})
}

func (k *kernel) AddVXLAN(v nl.VXLAN) error {
	k.write()
	return k.do(func(n *NS) error {
		err := checkNew(n, v.Name, v.MTU)
		port := v.Port
		if port == 0 {
			port = 8472 // the kernel's default
		}
		if err == nil && v.VNI >= 1<<24 {
			err = unix.ERANGE
		}
		for _, o := range n.links {
			if err == nil && o.Kind == "vxlan" && o.Port == port && o.External == v.External && (v.External || o.VNI == v.VNI && o.Local == v.Local) {
				err = unix.EEXIST
			}
		}
		if err != nil {
			return fmt.Errorf("nl: add vxlan %s (vni %d): %w", v.Name, v.VNI, err)
		}
		l := n.newLink(v.Name, "vxlan")
		if v.MTU > 0 {
			l.MTU = v.MTU
		}
		l.Port, l.External, l.hw = port, v.External, n.tunnelHW
		if !v.External {
			l.VNI, l.Local = v.VNI, v.Local
		}
		n.place(l)
		k.mark(n, l, v.Alias)
		return nil
	})
}

// pair makes a veth pair: the peer first (in pn, the lower index when
// both are in one namespace, as the kernel registers it first), then
// name in n.
func pair(n *NS, name string, pn *NS, peer string, mtu int) (*link, *link) {
	p := pn.newLink(peer, "veth")
	if mtu > 0 {
		p.MTU = mtu
	}
	pn.place(p)
	l := n.newLink(name, "veth")
	l.MTU = p.MTU
	n.place(l)
	l.peer, p.peer = p, l
	return l, p
}

func (k *kernel) AddPair(p nl.Pair) error {
	k.write()
	return k.do(func(n *NS) error {
		var mac net.HardwareAddr
		err := checkNew(n, p.Name, p.MTU)
		if err == nil {
			err = checkNew(n, p.Peer, 0)
		}
		if err == nil && p.Name == p.Peer {
			err = unix.EEXIST
		}
		if err == nil && p.MAC != "" {
			var perr error
			if mac, perr = net.ParseMAC(p.MAC); perr != nil {
				return fmt.Errorf("nl: veth %s mac %q: %w", p.Name, p.MAC, perr)
			}
			if mac[0]&1 != 0 || strings.Trim(mac.String(), "0:") == "" {
				err = unix.EADDRNOTAVAIL
			}
		}
		if err != nil {
			return fmt.Errorf("nl: add veth %s/%s: %w", p.Name, p.Peer, err)
		}
		l, peer := pair(n, p.Name, n, p.Peer, p.MTU)
		if mac != nil {
			l.MAC, l.macSet = mac.String(), true
		}
		k.mark(n, l, p.Alias)
		k.mark(n, peer, p.PeerAlias)
		return nil
	})
}

func (k *kernel) AddVeth(v nl.Veth, peer nl.Kernel) error {
	n, err := k.lock()
	if err != nil {
		return err
	}
	defer k.w.mu.Unlock()
	pn, err := k.peerOf("add veth "+v.Name, peer)
	if err != nil {
		return err
	}
	k.write()
	err = checkNew(n, v.Name, v.MTU)
	if err == nil {
		err = checkNew(pn, v.PeerName, 0)
	}
	if err == nil && pn == n && v.Name == v.PeerName {
		err = unix.EEXIST
	}
	if err != nil {
		return fmt.Errorf("nl: add veth %s (peer %s in %s): %w", v.Name, v.PeerName, where(pn.path), err)
	}
	l, _ := pair(n, v.Name, pn, v.PeerName, v.MTU)
	k.mark(n, l, v.Alias)
	return nil
}

func (k *kernel) AddTap(t nl.Tap) error {
	k.write()
	return k.do(func(n *NS) error {
		if err := checkNew(n, t.Name, t.MTU); err != nil {
			return fmt.Errorf("nl: add tap %s: %w", t.Name, err)
		}
		l := k.create(n, t.Name, nl.TapKind, t.MTU, "")
		l.owner = [2]uint32{t.Owner, t.Group}
		k.mark(n, l, t.Alias)
		return nil
	})
}

// set counts a write and runs f on the link of index, naming the link
// in f's error as the real handle does.
func (k *kernel) set(index int, what string, f func(n *NS, l *link) error) error {
	k.write()
	return k.do(func(n *NS) error {
		l, err := n.link(index)
		if err != nil {
			return err
		}
		if err := f(n, l); err != nil {
			return fmt.Errorf("nl: %s %s: %w", what, l.Name, err)
		}
		return nil
	})
}

func (k *kernel) DeleteLink(index int) error {
	k.write()
	return k.do(func(n *NS) error {
		l := n.links[index]
		if l == nil {
			return nil // gone: no error
		}
		if l.Kind == "device" {
			return fmt.Errorf("nl: delete %s: %w", l.Name, unix.EOPNOTSUPP)
		}
		n.deleteLink(l)
		return nil
	})
}

func (k *kernel) SetMaster(index, master int) error {
	return k.set(index, fmt.Sprintf("set master %d of", master), func(n *NS, l *link) error {
		if l.Master == master {
			return nil
		}
		if l.Master != 0 {
			n.unport(l)
		}
		if master == 0 {
			return nil
		}
		br := n.links[master]
		switch {
		case br == nil:
			return unix.EINVAL
		case br.Kind != "bridge":
			return unix.EOPNOTSUPP
		case l.Kind == "bridge":
			return unix.ELOOP // a bridge in a bridge
		case l.Name == "lo" || br == l:
			return unix.EINVAL
		}
		n.port(l, br)
		return nil
	})
}

func (k *kernel) SetUp(index int) error {
	return k.set(index, "set up", func(n *NS, l *link) error {
		n.up(l)
		return nil
	})
}

func (k *kernel) SetDown(index int) error {
	return k.set(index, "set down", func(n *NS, l *link) error {
		n.down(l)
		return nil
	})
}

func (k *kernel) SetMTU(index, mtu int) error {
	return k.set(index, fmt.Sprintf("set mtu %d of", mtu), func(n *NS, l *link) error {
		if mtu < 68 || mtu > 65535 {
			return unix.EINVAL
		}
		if l.Kind == "bridge" {
			l.mtuSet = true
		}
		if l.MTU == mtu {
			return nil
		}
		l.MTU = mtu
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		n.lowerVLANs(l)
		if br := n.links[l.Master]; br != nil {
			n.adjustBridge(br)
		}
		return nil
	})
}

func (k *kernel) SetAlias(index int, alias string) error {
	return k.set(index, "set alias of", func(n *NS, l *link) error {
		if len(alias) >= 256 {
			return unix.EINVAL
		}
		l.Alias = alias
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		return nil
	})
}

func (k *kernel) SetMAC(index int, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("nl: mac %q: %w", mac, err)
	}
	return k.set(index, "set mac of", func(n *NS, l *link) error {
		if len(hw) != 6 || hw[0]&1 != 0 || strings.Trim(hw.String(), "0:") == "" {
			return unix.EADDRNOTAVAIL
		}
		old := l.MAC
		if l.Kind == "bridge" {
			n.bridgeMAC(l, hw.String())
		}
		l.MAC, l.macSet = hw.String(), true
		if br := n.links[l.Master]; br != nil && old != l.MAC {
			if e := br.fdb[fdbKey{mac: old}]; e != nil && e.kernel && e.port == l {
				delete(br.fdb, fdbKey{mac: old})
			}
			if _, ok := br.fdb[fdbKey{mac: l.MAC}]; !ok {
				br.fdb[fdbKey{mac: l.MAC}] = &brFDB{port: l, permanent: true, kernel: true}
			}
			n.adjustBridge(br)
		}
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		return nil
	})
}

// Rename sets the link down first when it is up, as the real handle
// does: a rename refused (EEXIST) leaves it down.
func (k *kernel) Rename(index int, name string) error {
	return k.set(index, "rename to "+name+":", func(n *NS, l *link) error {
		n.down(l)
		if l.Name == name {
			return nil
		}
		if !validName(name) {
			return unix.EINVAL
		}
		if n.byName(name) != nil {
			return unix.EEXIST
		}
		l.Name = name
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		return nil
	})
}

func (k *kernel) MoveLink(index int, to nl.Kernel) error {
	n, err := k.lock()
	if err != nil {
		return err
	}
	defer k.w.mu.Unlock()
	tn, err := k.peerOf(fmt.Sprintf("move link %d", index), to)
	if err != nil {
		return err
	}
	k.write()
	l, err := n.link(index)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("nl: move to %s: %s: %w", where(tn.path), l.Name, err) }
	switch {
	case tn == n:
		return nil
	case l.Name == "lo" || l.Kind == "bridge":
		return fail(unix.EINVAL) // local to its namespace
	case tn.byName(l.Name) != nil:
		return fail(unix.EEXIST)
	}
	n.detach(l)
	n.remove(l)
	tn.place(l)
	return nil
}

func (k *kernel) PortFlags(index int) (nl.PortFlags, error) {
	var out nl.PortFlags
	err := k.port(index, func(l *link) { out = l.flags })
	return out, err
}

func (k *kernel) SetPortFlags(index int, f nl.PortFlags) error {
	return k.setPort(index, "learning", func(l *link) bool {
		changed := l.flags != f
		l.flags = f
		return changed
	})
}

// port runs fn on the bridge port index; another link is the kernel's
// error (it has no protinfo).
func (k *kernel) port(index int, fn func(l *link)) error {
	return k.do(func(n *NS) error {
		l, err := n.link(index)
		if err != nil {
			return err
		}
		if l.Master == 0 {
			return fmt.Errorf("nl: port flags of %s: Device with index %d not found", l.Name, index)
		}
		fn(l)
		return nil
	})
}

// setPort counts a write per flag, as the real handle does (three; the
// first, named first, fails on a link that is no port), and runs change,
// an event when it changed something.
func (k *kernel) setPort(index int, first string, change func(l *link) bool) error {
	return k.do(func(n *NS) error {
		l, err := n.link(index)
		if err != nil {
			return err
		}
		k.write()
		if l.Master == 0 {
			return fmt.Errorf("nl: set %s on %s: %w", first, l.Name, unix.EOPNOTSUPP)
		}
		k.write()
		k.write()
		if change(l) {
			n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		}
		return nil
	})
}

func (k *kernel) Stats() (map[string]nl.Counters, error) {
	out := map[string]nl.Counters{}
	err := k.do(func(n *NS) error {
		for _, l := range n.links {
			out[l.Name] = l.stats
		}
		return nil
	})
	return out, err
}
