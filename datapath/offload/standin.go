package offload

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// standIns makes the egress of each representor with a stand-in
// (Port.Target) hold exactly one filter of Skiff's, sending everything
// the representor transmits (what the replication bridge floods to the
// endpoint) to the stand-in, as the VF would receive it; the egress of
// the eswitch's other ports holds none of Skiff's. Someone else's egress
// filters stay. Forwarding sends to the stand-in directly; only the
// bridge transmits on the representor.
func (d *Datapath) standIns(in flower.Input, byName map[string]nl.Link) error {
	want := map[int]tc.Filter{}
	for ep, rep := range in.Reps {
		t, ok := byName[in.Targets[ep]]
		r, rok := byName[rep]
		if !ok || !rok || in.Targets[ep] == "" {
			continue
		}
		rule := flower.Rule{Dev: rep, Prio: flower.PrioUnicast, EthType: flower.EthAll, Kind: flower.KindStandIn, Endpoint: ep,
			Actions: []flower.Action{{Kind: flower.Redirect, Dev: in.Targets[ep]}}}
		want[r.Index] = tc.Filter{Ifindex: r.Index, Parent: tc.Egress, Prio: flower.PrioUnicast, Proto: unix.ETH_P_ALL, Handle: 1,
			Kind: "flower", Flags: tc.TCA_CLS_FLAGS_SKIP_HW,
			Actions: []tc.Action{{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: t.Index, Cookie: rule.Cookie()}}}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		l := byName[name]
		w, wanted := want[l.Index]
		if l.SwitchID == "" && !wanted {
			continue
		}
		if wanted {
			if err := d.tcc.AddClsact(l.Index); err != nil && !errors.Is(err, unix.EEXIST) {
				errs = append(errs, fmt.Errorf("offload datapath: clsact on %s: %w", name, err))
				continue
			}
		}
		have, err := d.tcc.Dump(l.Index, tc.DumpOptions{Parent: tc.Egress})
		if err != nil {
			if !wanted && errors.Is(err, unix.EINVAL) {
				continue // no clsact: nothing of anyone's
			}
			errs = append(errs, fmt.Errorf("offload datapath: egress filters of %s: %w", name, err))
			continue
		}
		ok := false
		for _, f := range have {
			if len(f.Actions) == 0 || !bytes.HasPrefix(f.Actions[0].Cookie, []byte("sk")) {
				continue // not Skiff's
			}
			if wanted && !ok && f.Prio == w.Prio && f.Handle == w.Handle && len(f.Actions) == 1 &&
				f.Actions[0].Ifindex == w.Actions[0].Ifindex && bytes.Equal(f.Actions[0].Cookie, w.Actions[0].Cookie) {
				ok = true
				continue
			}
			f.Parent = tc.Egress
			d.tccWrites.Add(1)
			if err := d.tcc.Do(tc.Op{Kind: tc.Delete, Filter: &f}); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("offload datapath: egress filter of %s: %w", name, err))
			}
		}
		if wanted && !ok {
			d.tccWrites.Add(1)
			if err := d.tcc.Do(tc.Op{Kind: tc.Add, Filter: &w}); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: stand-in filter on %s egress: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
