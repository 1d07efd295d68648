// Package datapath defines what the agent asks of a datapath: make the
// kernel (or the NIC) match a whole plan.
package datapath

import "github.com/skiff-sdn/skiff/internal/plan"

// Datapath executes plans.
type Datapath interface {
	// Apply makes the datapath match p, whole: it creates what is missing,
	// corrects what differs, and removes what it owns that p no longer
	// holds, adding before deleting. It is idempotent (applying the same
	// plan to a matching datapath writes nothing), level-triggered (it
	// compares with what the kernel reports, never with what it did
	// before), touches only objects it owns, and returns every error it
	// met, joined, after doing all it could. Not safe for concurrent use.
	Apply(p plan.Plan) error
}
