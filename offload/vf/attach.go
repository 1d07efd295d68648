package vf

import (
	"errors"
	"fmt"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// settingsOf turns what the PF reports for a VF back into Settings, to
// restore it.
func settingsOf(v nl.VF) Settings {
	mac := v.Mac
	if len(mac) == 0 {
		mac = ZeroMAC
	}
	return Settings{MAC: mac, VLAN: Ptr(v.Vlan), QoS: Ptr(v.Qos), SpoofCheck: Ptr(v.Spoofchk), Trust: Ptr(v.Trust != 0),
		LinkState: Ptr(LinkState(v.LinkState))}
}

// Attach gives a VF to a pod: it sets s through the PF, moves the VF's
// netdev from the host namespace into podNS, renames it to ifc.Name and
// gives it its MAC, MTU, addresses and routes, and sets it up. The netdev
// is marked (its alias records the VF and its home name and MTU), so
// that Detach and Stranded find it wherever it is.
//
// Idempotent: a VF already in podNS under ifc.Name only has its settings
// and configuration made to match. On error every step done is undone:
// the VF is back in the host under its name, unmarked, with its PF
// settings as they were.
func (m *Mover) Attach(ref Ref, s Settings, podNS string, ifc PodIface) error {
	if err := validName(ifc.Name); err != nil {
		return fmt.Errorf("vf: attach %s: interface name: %w", ref, err)
	}
	if podNS == "" {
		return fmt.Errorf("vf: attach %s: no pod namespace", ref)
	}
	if ifc.MTU < 0 {
		return fmt.Errorf("vf: attach %s: MTU %d", ref, ifc.MTU)
	}
	cfg := nl.LinkConfig{MTU: ifc.MTU, Addrs: ifc.Addrs, Routes: ifc.Routes}
	if ifc.MAC != nil {
		cfg.MAC = ifc.MAC.String()
	}

	pod, err := m.open(podNS)
	if err != nil {
		return fmt.Errorf("vf: attach %s: %w", ref, err)
	}
	defer pod.Close()
	// Already there (a repeated ADD)?
	in, err := pod.LinkByName(ifc.Name)
	switch {
	case err == nil:
		if k, ok := parseMark(in.Alias); !ok || k.pci != ref.PCI {
			return fmt.Errorf("vf: attach %s: the pod already has an interface %s (alias %q)", ref, ifc.Name, in.Alias)
		}
		if err := m.mgr.Apply(ref.PF, ref.Index, s); err != nil {
			return fmt.Errorf("vf: attach %s: %w", ref, err)
		}
		if err := nl.Configure(pod, ifc.Name, cfg); err != nil {
			return fmt.Errorf("vf: attach %s: %w", ref, err)
		}
		return nil
	case !errors.Is(err, nl.ErrNoLink):
		return fmt.Errorf("vf: attach %s: %w", ref, err)
	}

	home, err := m.hostNetdev(ref.PCI)
	if err != nil {
		return fmt.Errorf("vf: attach %s: %w", ref, err)
	}
	if home == "" {
		return fmt.Errorf("vf: attach %s: the VF has no netdev in the host namespace (bound to vfio-pci or no driver, or already in another pod)", ref)
	}
	cur, err := m.host.LinkByName(home)
	if err != nil {
		return fmt.Errorf("vf: attach %s: %w", ref, err)
	}
	k := mark{pci: ref.PCI, home: home, mtu: cur.MTU}
	if old, ok := parseMark(cur.Alias); ok && old.pci == ref.PCI {
		// Back from a destroyed namespace and not yet given back: its
		// home is what the mark says.
		k = old
	} else if cur.Alias != "" {
		return fmt.Errorf("vf: attach %s: netdev %s has alias %q: not Skiff's to move", ref, home, cur.Alias)
	}
	prev, err := m.mgr.State(ref.PF, ref.Index)
	if err != nil {
		return fmt.Errorf("vf: attach %s: %w", ref, err)
	}

	var undo undoStack
	fail := func(err error) error { return undo.run(fmt.Errorf("vf: attach %s: %w", ref, err)) }
	undo.push(func() error { return m.mgr.Apply(ref.PF, ref.Index, settingsOf(prev)) })
	if err := m.mgr.Apply(ref.PF, ref.Index, s); err != nil {
		return fail(err)
	}
	undo.push(func() error {
		return named(m.host, home, func(l nl.Link) error { return m.host.SetAlias(l.Index, cur.Alias) })
	})
	if err := m.host.SetAlias(cur.Index, k.String()); err != nil {
		return fail(err)
	}
	if err := m.host.MoveLink(cur.Index, pod); err != nil {
		return fail(err)
	}
	undo.push(func() error { return named(pod, home, func(l nl.Link) error { return pod.MoveLink(l.Index, m.host) }) })
	if err := named(pod, home, func(l nl.Link) error { return pod.Rename(l.Index, ifc.Name) }); err != nil {
		return fail(err)
	}
	undo.push(func() error { return named(pod, ifc.Name, func(l nl.Link) error { return pod.Rename(l.Index, home) }) })
	undo.push(func() error {
		if ifc.MTU > 0 && ifc.MTU != cur.MTU {
			return named(pod, ifc.Name, func(l nl.Link) error { return pod.SetMTU(l.Index, cur.MTU) })
		}
		return nil
	})
	if err := nl.Configure(pod, ifc.Name, cfg); err != nil {
		return fail(err)
	}
	m.log.Info("VF attached", "vf", ref.PCI, "pf", ref.PF, "index", ref.Index, "netns", podNS, "ifname", ifc.Name, "home", home)
	return nil
}

// Detach gives a VF back to the host namespace under its home name, with
// its MTU restored, its alias cleared, down, and its MAC cleared through
// the PF. The VF is looked for in podNS under podIf (or by its mark);
// when podNS is gone, or the VF is not in it, in the host namespace by
// its PCI address (a namespace's destruction returns its devices to the
// init namespace, named as in the pod or devN), waiting up to
// ReturnWait for the kernel to bring it back. An error wrapping
// ErrVFAway says it did not come back in that time.
//
// Idempotent: a VF already at home only has its alias and MAC made sure
// of. When the move back fails (a foreign device took the home name),
// the VF is left in the pod as it was.
func (m *Mover) Detach(ref Ref, podNS, podIf string) error {
	cur, pod, err := m.find(ref, podNS, podIf)
	if err != nil {
		return fmt.Errorf("vf: detach %s: %w", ref, err)
	}
	inPod := pod != nil
	if inPod {
		defer pod.Close()
	}
	k, marked := parseMark(cur.Alias)
	if !marked || k.pci != ref.PCI {
		k = mark{pci: ref.PCI, home: cur.Name}
		marked = false
	}
	switch {
	case inPod:
		if err := pod.SetDown(cur.Index); err != nil {
			return fmt.Errorf("vf: detach %s: %w", ref, err)
		}
		if cur.Name != k.home {
			if err := pod.Rename(cur.Index, k.home); err != nil {
				return fmt.Errorf("vf: detach %s: %w", ref, err)
			}
		}
		if err := pod.MoveLink(cur.Index, m.host); err != nil {
			err = fmt.Errorf("vf: detach %s: %w", ref, err)
			if cur.Name != k.home {
				err = errors.Join(err, pod.Rename(cur.Index, cur.Name))
			}
			return err
		}
	case marked:
		// Back in the host by the kernel's doing, under its pod name or
		// devN.
		if cur.Up {
			if err := m.host.SetDown(cur.Index); err != nil {
				return fmt.Errorf("vf: detach %s: %w", ref, err)
			}
		}
		if cur.Name != k.home {
			if err := m.host.Rename(cur.Index, k.home); err != nil {
				return fmt.Errorf("vf: detach %s (back as %s): %w", ref, cur.Name, err)
			}
		}
	}
	// An unmarked VF in the host is at home already: only its MAC is
	// made sure of.
	var errs []error
	if marked {
		errs = append(errs, named(m.host, k.home, func(l nl.Link) error {
			var errs []error
			if k.mtu > 0 && l.MTU != k.mtu {
				errs = append(errs, m.host.SetMTU(l.Index, k.mtu))
			}
			return errors.Join(append(errs, m.host.SetAlias(l.Index, ""))...)
		}))
	}
	if err := m.mgr.Apply(ref.PF, ref.Index, Settings{MAC: ZeroMAC}); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vf: detach %s: %w", ref, err)
	}
	m.log.Info("VF detached", "vf", ref.PCI, "pf", ref.PF, "index", ref.Index, "home", k.home, "from pod", inPod)
	return nil
}

// named runs f on the link of that name in k.
func named(k nl.Kernel, name string, f func(l nl.Link) error) error {
	l, err := k.LinkByName(name)
	if err != nil {
		return err
	}
	return f(l)
}

// find locates a VF's netdev: in podNS (by name, then by mark; then pod
// is that namespace's handle, the caller's to close), else in the host
// by PCI address (pod nil), waiting for it there when it is in neither.
func (m *Mover) find(ref Ref, podNS, podIf string) (nl.Link, nl.Kernel, error) {
	podGone := podNS == ""
	if !podGone {
		pod, err := m.open(podNS)
		switch {
		case errors.Is(err, nl.ErrNoNetNS):
			podGone = true
		case err != nil:
			return nl.Link{}, nil, err
		default:
			l, found, err := markedIn(pod, ref, podIf)
			if found {
				return l, pod, nil
			}
			pod.Close()
			if err != nil {
				return nl.Link{}, nil, err
			}
		}
	}
	deadline := time.Now().Add(m.wait)
	for {
		name, err := m.hostNetdev(ref.PCI)
		if err != nil {
			return nl.Link{}, nil, err
		}
		if name != "" {
			l, err := m.host.LinkByName(name)
			if err == nil {
				return l, nil, nil
			}
			if !errors.Is(err, nl.ErrNoLink) {
				return nl.Link{}, nil, err
			}
		}
		if !podGone || time.Now().After(deadline) {
			where := "not in namespace " + podNS + " either"
			if podGone {
				where = fmt.Sprintf("its namespace %q is gone and it did not come back within %v", podNS, m.wait)
			}
			return nl.Link{}, nil, fmt.Errorf("%w: no netdev in the host, %s", ErrVFAway, where)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// markedIn finds ref's netdev in the pod's namespace: by its name there,
// else by its mark.
func markedIn(pod nl.Kernel, ref Ref, podIf string) (nl.Link, bool, error) {
	l, err := pod.LinkByName(podIf)
	if k, ok := parseMark(l.Alias); err == nil && ok && k.pci == ref.PCI {
		return l, true, nil
	}
	if err != nil && !errors.Is(err, nl.ErrNoLink) {
		return nl.Link{}, false, err
	}
	all, err := pod.Links()
	if err != nil {
		return nl.Link{}, false, err
	}
	for _, l := range all {
		if k, ok := parseMark(l.Alias); ok && k.pci == ref.PCI {
			return l, true, nil
		}
	}
	return nl.Link{}, false, nil
}

// Stranded returns those of refs whose netdev is in the host namespace
// still marked as moved into a pod: it came back from a destroyed
// namespace and was not given back with Detach. Detach(ref, "", "")
// gives each back. A VF without a netdev in the host is not stranded.
func (m *Mover) Stranded(refs []Ref) ([]Ref, error) {
	var out []Ref
	var errs []error
	for _, r := range refs {
		name, err := m.hostNetdev(r.PCI)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if name == "" {
			continue
		}
		d, err := m.host.LinkByName(name)
		if errors.Is(err, nl.ErrNoLink) {
			continue // moved between the two reads
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k, ok := parseMark(d.Alias); ok && k.pci == r.PCI {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}
