// Package eswitch discovers a node's SR-IOV physical functions, their virtual
// functions and the switchdev representors that stand for them, from sysfs
// and devlink, and changes the two things an agent needs to change: the
// eswitch mode (legacy or switchdev, through the devlink netlink family) and
// the number of VFs (sriov_numvfs).
//
// Discovery reads only sysfs (the root is injectable, so tests run against
// fixture trees) plus the devlink eswitch mode, behind the small [Devlink]
// interface:
//
//	d, err := eswitch.New(eswitch.Options{Logger: log})  // /sys and real devlink
//	node, err := d.Discover()
//	for _, pf := range node.PFs {
//		rep, err := pf.RepresentorForVF(3)  // pf0vf3, or c1pf0vf3 on a DPU
//	}
//	err = d.SetMode(ctx, "ens1f0", eswitch.ModeSwitchdev)
//	err = d.SetNumVFs("ens1f0", 8)                         // goes through 0 if needed
//
// What is recognised:
//   - a PF is a netdev whose device has sriov_totalvfs or sriov_numvfs, or an
//     uplink representor (phys_port_name pN) of a switchdev eswitch;
//   - VFs come from the PF device's virtfnN links (N is the VF index), their
//     host-side netdevs from virtfnN/net/*, their drivers from virtfnN/driver;
//   - representors are netdevs with the PF's phys_switch_id and a
//     phys_port_name in one of the forms the kernel and drivers use: pN
//     (uplink), pNsM (split uplink), pfNvfM, cCpfNvfM (VF of an external
//     host controller, BlueField), pfNhpf and cCpfN (the host PF on a DPU),
//     pfNsfM and cCpfNsfM (sub-functions).
//
// A node is a DPU when it holds representors of an external controller
// (cCpf...) or of a host PF; it is a host with an eswitch when some PF is in
// switchdev mode. Problems with one object (a broken link, a phys_port_name
// that makes no sense) do not stop discovery: they are collected in
// [Node.Problems], each naming the sysfs path and the reason.
package eswitch
