// Package vf configures SR-IOV virtual functions from the host side: the
// settings a PF holds for each of its VFs (MAC, VLAN and QoS, spoof check,
// trust, link state, rate limits), set over rtnetlink on the PF; the
// binding of a VF's PCI function to vfio-pci (for a VM) and back to the
// driver it had, through sysfs; and moving a VF's netdev into a pod's
// network namespace and back.
//
//	k, err := nl.Open("")                                // the host's namespace: PFs and VFs
//	m := vf.NewManager(vf.Options{Netlink: k, Logger: log})
//	err := m.Apply("ens1f0np0", 3, vf.Settings{
//		MAC: mac, VLAN: vf.Ptr(100), SpoofCheck: vf.Ptr(true), Trust: vf.Ptr(false),
//		LinkState: vf.Ptr(vf.LinkAuto), MaxTxRateMbps: vf.Ptr(uint32(1000)),
//	})
//
//	b := vf.NewBinder(vf.BinderOptions{Logger: log})    // /sys
//	prev, err := b.BindVFIO("0000:03:00.5")              // remembers nothing: keep prev
//	err = b.Restore("0000:03:00.5", prev)
//
//	mv := vf.NewMover(vf.MoverOptions{Host: k, Logger: log}) // /sys; pods' namespaces by nl.Open
//	ref := vf.Ref{PF: "ens1f0np0", Index: 3, PCI: "0000:03:00.5"}
//	err = mv.Attach(ref, vf.PodSettings(mac), "/var/run/netns/cni-1234", vf.PodIface{
//		Name: "eth0", MAC: mac, MTU: 1450, Addrs: addrs, Routes: routes})
//	err = mv.Detach(ref, "/var/run/netns/cni-1234", "eth0") // also when the namespace is gone
//	stranded, err := mv.Stranded(vf.RefsOf(node))            // back from dead namespaces
//
// Apply reads the VF's current state first and changes only what differs,
// so applying the same settings again does nothing. BindVFIO and Restore are
// idempotent: binding a function that is already on vfio-pci, or restoring
// one already on its driver, only makes sure driver_override is right.
package vf
