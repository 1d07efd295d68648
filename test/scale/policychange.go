package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// policyItem names, for a watch, the policy item of endpoint ep in a plan
// (endpoint names hold no slash).
func policyItem(ep string) string { return "policy/" + ep }

// PolicyChange changes n policies one after another, each a random one of
// the workload's moved to a new port (its rules change, its selection and
// groups do not), and measures the time from the call to every agent
// hosting an endpoint the policy selects holding that endpoint's new
// rules.
func (e *Env) PolicyChange(ctx context.Context, n int) error {
	const sc = "policy change"
	if e.Work.Policies == 0 {
		return errors.New("policy change: the workload has no policies (--policies)")
	}
	var total, api []time.Duration
	nodes := 0
	for k := range n {
		var i int
		e.random(func(r *rand.Rand) { i = r.IntN(e.Work.Policies) })
		t0 := time.Now()
		var ws []*Watch
		for _, x := range e.Work.PolicySelects(i) {
			ep := e.Work.Endpoint(x)
			if e.Fleet.Agent(ep.Node) == nil {
				continue
			}
			ws = append(ws, e.Fleet.Expect(policyItem(ep.Name), []string{ep.Node}, false))
		}
		nodes += len(ws)
		if _, err := e.Mgmt.ApplyPolicies(ctx, &skiffv1.ApplyPoliciesRequest{Documents: e.Work.PolicyDocument(i, k+1)}); err != nil {
			return fmt.Errorf("policy change %d (p%05d): %w", k, i, err)
		}
		called := time.Since(t0)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var last time.Duration
		for _, w := range ws {
			d, err := e.Fleet.Wait(wctx, w)
			if err != nil {
				cancel()
				return fmt.Errorf("policy change %d (p%05d): %w", k, i, err)
			}
			last = max(last, d+w.Start.Sub(t0))
		}
		cancel()
		total, api = append(total, last), append(api, called)
	}
	e.Report.Add(sc, fmt.Sprintf("policy changed -> every agent of an endpoint it selects has the endpoint's new rules, p50 / p99 over %d", n),
		"%s / %s (max %s; %.1f endpoints per policy)", ms(Percentile(total, 50)), ms(Percentile(total, 99)), ms(Percentile(total, 100)), float64(nodes)/float64(max(n, 1)))
	e.Report.Add(sc, "of which the apply call, p50 / p99", "%s / %s", ms(Percentile(api, 50)), ms(Percentile(api, 99)))
	return nil
}
