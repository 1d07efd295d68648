// Package plan is Skiff's object model and the per-node plan as plain Go
// types. It depends on the standard library only, so that the controller,
// the agent and the datapaths can share it without importing each other.
//
// A Plan is the whole desired state of one node at a revision. Items are
// keyed by name, which makes plans cheap to compare:
//
//	d := plan.Diff(old, cur)  // what turns old into cur
//	next := old.Clone()
//	if err := next.Apply(d); err != nil { ... } // next equals cur
//
// Deltas compose: Merge(a, b) is one delta with the effect of a then b, which
// is how a slow consumer's pending changes are coalesced.
//
// A group both plans hold goes in a delta as a member change
// (ChangeGroups: addresses added and removed) when that is smaller than
// the group, so that one endpoint joining a group of N members costs one
// address, not N. Apply refuses a change that does not fit the plan (the
// group not held, a removed member not in it, an added one in it),
// changing nothing: the receiver's plan is not the sender's, and the
// agent starts over from a snapshot.
//
// Follow is Apply that keeps the last MaxRecent deltas in the plan
// (Recent); Since(rev) returns those that lead from revision rev, so that
// a datapath that applied rev looks only at what they name. Revisions
// are the controller's store revisions: one node's plan at one nonzero
// revision is one state.
package plan
