//go:build kernelvm_long

package offloadpolicyvm

import "testing"

// TestPolicyTruthSoftware is the control: the same truth table on three
// software nodes (nftables) in the same harness. The e2e tier holds
// software nodes to the table on the host kernel in make test; this one
// runs in make test-kernel-long (run.sh -tags kernelvm_long), which
// builds this file.
func TestPolicyTruthSoftware(t *testing.T) { truthTable(t, "software", false) }
