// Package planfile keeps an agent's last plan on disk, so that a restarted
// agent applies it before the controller answers (which changes nothing in
// a kernel that already matches) and resumes its plan stream from that
// plan's revision.
//
// The plan is a snapshot (plan.pb, written atomically) and the deltas
// accepted since, appended to plan.log as records (length, CRC-32C,
// skiff.v1.PlanDelta), each synced. Saving a delta costs the size of the
// delta, not of the plan; the log is folded into a new snapshot once it is
// larger than the snapshot (at least 64 KiB), so reading it back never
// costs more than reading the snapshot twice. A crash leaves at worst a
// torn last record, which Load cuts off.
//
//	f := planfile.Open("/var/lib/skiff-agent", "node-1", log)
//	p, ok, err := f.Load() // the saved plan, if any
//	...
//	err = f.Snapshot(p)          // a snapshot from the controller
//	err = f.Append(next, deltaPB) // a delta that took p to next
package planfile
