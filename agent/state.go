package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

const stateFile = "plan.pb"

// loadPlan reads the last plan kept in dir. ok is false when there is none.
func loadPlan(dir, node string) (p plan.Plan, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return plan.Plan{}, false, nil
	}
	if err != nil {
		return plan.Plan{}, false, fmt.Errorf("agent: read state: %w", err)
	}
	var pb skiffv1.Plan
	if err := proto.Unmarshal(b, &pb); err != nil {
		return plan.Plan{}, false, fmt.Errorf("agent: state %s is corrupt: %w", filepath.Join(dir, stateFile), err)
	}
	p, err = planpb.Plan(&pb)
	if err != nil {
		return plan.Plan{}, false, fmt.Errorf("agent: state %s: %w", filepath.Join(dir, stateFile), err)
	}
	if p.Node != node {
		return plan.Plan{}, false, fmt.Errorf("agent: state %s belongs to node %q, not %q", filepath.Join(dir, stateFile), p.Node, node)
	}
	return p, true, nil
}

// savePlan writes p to dir atomically (write, sync, rename).
func savePlan(dir string, p plan.Plan) error {
	b, err := proto.Marshal(planpb.PlanPB(p))
	if err != nil {
		return fmt.Errorf("agent: encode state: %w", err)
	}
	return writeAtomic(dir, stateFile, b)
}
