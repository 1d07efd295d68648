package nl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Attributes of a bridge port's VLANs in an AF_BRIDGE link dump
// (include/uapi/linux/if_bridge.h).
const (
	iflaBridgeVLANInfo       = 2 // IFLA_BRIDGE_VLAN_INFO: struct bridge_vlan_info
	iflaBridgeVLANTunnelInfo = 3 // IFLA_BRIDGE_VLAN_TUNNEL_INFO, nested:
	tunnelID                 = 1 //   IFLA_BRIDGE_VLAN_TUNNEL_ID, u32
	tunnelVID                = 2 //   IFLA_BRIDGE_VLAN_TUNNEL_VID, u16
	tunnelFlags              = 3 //   IFLA_BRIDGE_VLAN_TUNNEL_FLAGS, u16
	vlanInfoPVID             = 1 << 1
	vlanInfoUntagged         = 1 << 2
	vlanInfoRangeBegin       = 1 << 3
	vlanInfoRangeEnd         = 1 << 4
	rtextFilterBRVLAN        = 1 << 1
)

func (k *real) BridgePort(index int) (BridgePort, error) {
	p, err := k.protinfo(index)
	return BridgePort{Flood: p.Flood, Isolated: p.Isolated, VLANTunnel: p.VlanTunnel}, err
}

func (k *real) SetBridgePort(index int, p BridgePort) error {
	return k.setFlags(index, []portFlag{{"flood", k.h.LinkSetFlood, p.Flood},
		{"isolated", k.h.LinkSetIsolated, p.Isolated}, {"vlan_tunnel", k.h.LinkSetVlanTunnel, p.VLANTunnel}})
}

func (k *real) AddBridgeVLAN(v BridgeVLAN) error {
	if err := k.set(v.LinkIndex, fmt.Sprintf("add vlan %d to", v.VID), func(l netlink.Link) error {
		return k.h.BridgeVlanAdd(l, v.VID, v.Access, v.Access, false, false)
	}); err != nil || v.TunnelID == 0 {
		return err
	}
	return k.set(v.LinkIndex, fmt.Sprintf("map vlan %d to tunnel id %d on", v.VID, v.TunnelID), func(l netlink.Link) error {
		return k.h.BridgeVlanAddTunnelInfo(l, v.VID, 0, v.TunnelID, 0, false, false)
	})
}

func (k *real) DeleteBridgeVLAN(v BridgeVLAN) error {
	err := k.set(v.LinkIndex, fmt.Sprintf("delete vlan %d from", v.VID), func(l netlink.Link) error {
		return k.h.BridgeVlanDel(l, v.VID, v.Access, v.Access, false, false)
	})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// BridgeVLANs reads the ports' VLANs from an AF_BRIDGE link dump (the
// netlink library's listing of tunnel ids does not say whose they are).
func (k *real) BridgeVLANs() (map[int][]BridgeVLAN, error) {
	req := make([]byte, 16) // struct ifinfomsg
	req[0] = unix.AF_BRIDGE
	e := rtnl.NewEncoder(req)
	e.U32(unix.IFLA_EXT_MASK, rtextFilterBRVLAN)
	var out map[int][]BridgeVLAN
	err := k.rawDo(func(c *rtnl.Conn) error {
		for range dumpRetries {
			out = map[int][]BridgeVLAN{}
			err := c.Dump(unix.RTM_GETLINK, e.Bytes(), func(_ rtnl.Header, p []byte) error {
				if len(p) < 16 {
					return nil
				}
				index := int(int32(binary.NativeEndian.Uint32(p[4:])))
				vs, err := decodeVLANs(index, p[16:], out[index])
				if len(vs) > 0 {
					out[index] = vs
				}
				return err
			})
			if !errors.Is(err, rtnl.ErrDumpInterrupted) {
				return err
			}
		}
		return rtnl.ErrDumpInterrupted
	})
	if err != nil {
		return nil, fmt.Errorf("nl: bridge vlans: %w", err)
	}
	for _, vs := range out {
		slices.SortFunc(vs, func(a, b BridgeVLAN) int { return int(a.VID) - int(b.VID) })
	}
	return out, nil
}

// decodeVLANs appends the VLANs (and tunnel ids) of one link message's
// attributes to out.
func decodeVLANs(index int, attrs []byte, out []BridgeVLAN) ([]BridgeVLAN, error) {
	d := rtnl.NewDecoder(attrs)
	start := len(out)
	tunnels := map[uint16]uint32{}
	for d.Next() {
		if d.Type() != unix.IFLA_AF_SPEC {
			continue
		}
		var begin *[2]uint32 // a tunnel range's first VID and id
		spec := d.Nested()
		for spec.Next() {
			switch spec.Type() {
			case iflaBridgeVLANInfo:
				if b := spec.Bytes(); len(b) >= 4 {
					flags, vid := binary.NativeEndian.Uint16(b), binary.NativeEndian.Uint16(b[2:])
					out = append(out, BridgeVLAN{LinkIndex: index, VID: vid, Access: flags&vlanInfoPVID != 0 && flags&vlanInfoUntagged != 0})
				}
			case iflaBridgeVLANTunnelInfo:
				var id uint32
				var vid, flags uint16
				t := spec.Nested()
				for t.Next() {
					switch t.Type() {
					case tunnelID:
						id = t.U32()
					case tunnelVID:
						vid = t.U16()
					case tunnelFlags:
						flags = t.U16()
					}
				}
				switch {
				case flags&vlanInfoRangeBegin != 0:
					begin = &[2]uint32{uint32(vid), id}
				case flags&vlanInfoRangeEnd != 0 && begin != nil:
					for v := begin[0]; v <= uint32(vid); v++ {
						tunnels[uint16(v)] = begin[1] + v - begin[0]
					}
					begin = nil
				default:
					tunnels[vid] = id
				}
				if err := t.Err(); err != nil {
					return out, err
				}
			}
		}
		if err := spec.Err(); err != nil {
			return out, err
		}
	}
	for i := start; i < len(out); i++ {
		out[i].TunnelID = tunnels[out[i].VID]
	}
	return out, d.Err()
}
