package nltest

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// A VLAN-aware bridge's ports: their flooding, isolation and VLAN
// tunnel flags and their VLANs. The fake keeps what it is told; it
// forwards no frames.

// bridgePort is l as a bridge port, or the kernel's error for a link
// that is none.
func (n *NS) bridgePort(index int, what string) (*link, error) {
	l, err := n.link(index)
	if err != nil {
		return nil, err
	}
	if l.Master == 0 || n.links[l.Master] == nil || n.links[l.Master].Kind != "bridge" {
		return nil, fmt.Errorf("nl: %s %s: %w", what, l.Name, unix.EOPNOTSUPP)
	}
	return l, nil
}

func (k *kernel) BridgePort(index int) (nl.BridgePort, error) {
	var out nl.BridgePort
	err := k.port(index, func(l *link) { out = l.bport })
	return out, err
}

func (k *kernel) SetBridgePort(index int, p nl.BridgePort) error {
	return k.setPort(index, "flood", func(l *link) bool {
		changed := l.bport != p
		l.bport = p
		return changed
	})
}

func (k *kernel) BridgeVLANs() (map[int][]nl.BridgeVLAN, error) {
	out := map[int][]nl.BridgeVLAN{}
	err := k.do(func(n *NS) error {
		for _, l := range n.links {
			if len(l.vlans) > 0 {
				out[l.Index] = slices.Clone(l.vlans)
			}
		}
		return nil
	})
	return out, err
}

func (k *kernel) AddBridgeVLAN(v nl.BridgeVLAN) error {
	k.write()
	return k.do(func(n *NS) error {
		l, err := n.bridgePort(v.LinkIndex, fmt.Sprintf("add vlan %d to", v.VID))
		if err != nil {
			return err
		}
		if v.VID == 0 || v.VID >= 4095 {
			return fmt.Errorf("nl: add vlan %d to %s: %w", v.VID, l.Name, unix.EINVAL)
		}
		if v.TunnelID != 0 {
			k.write()
			if !l.bport.VLANTunnel {
				return fmt.Errorf("nl: map vlan %d to tunnel id %d on %s: %w", v.VID, v.TunnelID, l.Name, unix.EINVAL)
			}
		}
		v.LinkIndex = l.Index
		i, found := slices.BinarySearchFunc(l.vlans, v.VID, func(x nl.BridgeVLAN, vid uint16) int { return int(x.VID) - int(vid) })
		if found {
			if v.TunnelID == 0 {
				v.TunnelID = l.vlans[i].TunnelID // a VLAN added again keeps its tunnel id
			}
			l.vlans[i] = v
		} else {
			l.vlans = slices.Insert(l.vlans, i, v)
		}
		if v.Access {
			for j := range l.vlans { // one PVID per port
				if l.vlans[j].VID != v.VID {
					l.vlans[j].Access = false
				}
			}
		}
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		return nil
	})
}

func (k *kernel) DeleteBridgeVLAN(v nl.BridgeVLAN) error {
	k.write()
	return k.do(func(n *NS) error {
		l, err := n.bridgePort(v.LinkIndex, fmt.Sprintf("delete vlan %d from", v.VID))
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(l.vlans, func(x nl.BridgeVLAN) bool { return x.VID == v.VID }); i >= 0 {
			l.vlans = slices.Delete(l.vlans, i, i+1)
			n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		}
		return nil
	})
}
