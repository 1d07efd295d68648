package nltest

import (
	"fmt"
	"net"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// devlink eswitch modes and the VFs of SR-IOV PFs (staged by
// NS.AddDevlink and Device.VFs).

func (k *kernel) EswitchMode(bus, device string) (string, error) {
	var out string
	err := k.do(func(n *NS) error {
		mode, ok := n.devlink[bus+"/"+device]
		if !ok {
			return fmt.Errorf("nl: devlink %s/%s: %w", bus, device, unix.ENODEV)
		}
		out = mode
		return nil
	})
	return out, err
}

func (k *kernel) SetEswitchMode(bus, device, mode string) error {
	k.write()
	return k.do(func(n *NS) error {
		fail := func(err error) error {
			return fmt.Errorf("nl: devlink %s/%s: set eswitch mode %s: %w", bus, device, mode, err)
		}
		have, ok := n.devlink[bus+"/"+device]
		switch {
		case !ok:
			return fail(unix.ENODEV)
		case have == "":
			return fail(unix.EOPNOTSUPP) // no eswitch
		case mode != "legacy" && mode != "switchdev":
			return fail(unix.EINVAL)
		}
		n.devlink[bus+"/"+device] = mode
		return nil
	})
}

// pf is the PF of that name, or the real handle's error for a missing
// one (the netlink library's "Link not found", not nl.ErrNoLink).
func (n *NS) pf(name string) (*link, error) {
	l := n.byName(name)
	if l == nil {
		return nil, fmt.Errorf("nl: pf %s: %w", name, nl.ErrNoLink)
	}
	return l, nil
}

func (k *kernel) VFs(pf string) ([]nl.VF, error) {
	var out []nl.VF
	err := k.do(func(n *NS) error {
		l, err := n.pf(pf)
		if err != nil {
			return err
		}
		for _, v := range l.vfs {
			v.Mac = slices.Clone(v.Mac)
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// setVF counts a write and runs f on VF vf of pf (EINVAL when pf has no
// such VF).
func (k *kernel) setVF(pf string, vf int, what string, f func(v *nl.VF) error) error {
	k.write()
	return k.do(func(n *NS) error {
		l, err := n.pf(pf)
		if err != nil {
			return err
		}
		if vf < 0 || vf >= len(l.vfs) {
			err = unix.EINVAL
		} else {
			err = f(&l.vfs[vf])
		}
		if err != nil {
			return fmt.Errorf("nl: pf %s vf %d: set %s: %w", pf, vf, what, err)
		}
		n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
		return nil
	})
}

func (k *kernel) SetVFMAC(pf string, vf int, mac net.HardwareAddr) error {
	return k.setVF(pf, vf, "mac", func(v *nl.VF) error {
		if len(mac) != 6 || mac[0]&1 != 0 {
			return unix.EINVAL
		}
		v.Mac = slices.Clone(mac)
		return nil
	})
}

func (k *kernel) SetVFVlanQos(pf string, vf, vlan, qos int) error {
	return k.setVF(pf, vf, "vlan", func(v *nl.VF) error {
		if vlan < 0 || vlan > 4095 || qos < 0 || qos > 7 {
			return unix.EINVAL
		}
		v.Vlan, v.Qos = vlan, qos
		return nil
	})
}

func (k *kernel) SetVFSpoofCheck(pf string, vf int, on bool) error {
	return k.setVF(pf, vf, "spoof check", func(v *nl.VF) error {
		v.Spoofchk = on
		return nil
	})
}

func (k *kernel) SetVFTrust(pf string, vf int, on bool) error {
	return k.setVF(pf, vf, "trust", func(v *nl.VF) error {
		v.Trust = 0
		if on {
			v.Trust = 1
		}
		return nil
	})
}

func (k *kernel) SetVFLinkState(pf string, vf int, state uint32) error {
	return k.setVF(pf, vf, "link state", func(v *nl.VF) error {
		if state > unix.IFLA_VF_LINK_STATE_DISABLE {
			return unix.EINVAL
		}
		v.LinkState = state
		return nil
	})
}

func (k *kernel) SetVFRate(pf string, vf, minRate, maxRate int) error {
	return k.setVF(pf, vf, "rate", func(v *nl.VF) error {
		if minRate < 0 || maxRate < 0 || maxRate != 0 && minRate > maxRate {
			return unix.EINVAL
		}
		v.MinTxRate, v.MaxTxRate = uint32(minRate), uint32(maxRate)
		return nil
	})
}
