package offload

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// applyFloods makes the change of the named networks' flood lists, the
// only difference (with remote endpoints, which applyRemotes makes)
// between the last Apply's plan and p: a VTEP joining or leaving a
// network. No forwarding rule holds a flood list, so the change is the
// VXLAN device's flood entries of those VTEPs (replication.go) and the
// underlay next hops of VTEPs new to the node, nothing else written.
// flower.ErrNotIncremental: nothing was written.
func (d *Datapath) applyFloods(p plan.Plan, nets []string) error {
	if len(nets) == 0 {
		return nil
	}
	vx, ok := d.last.links[VXLANName]
	if !ok && len(d.flooding) > 0 {
		return flower.ErrNotIncremental
	}
	var gone, add []nl.FDB
	uses := map[netip.Addr]int{} // the change in each VTEP's users
	for _, name := range nets {
		o, n := d.last.plan.Networks[name], p.Networks[name]
		before, after := map[netip.Addr]bool{}, map[netip.Addr]bool{}
		for _, v := range o.FloodVTEPs {
			before[v] = true
		}
		for _, v := range n.FloodVTEPs {
			after[v] = true
		}
		for v := range before {
			if after[v] {
				continue
			}
			if v.Is4() {
				uses[v]--
			}
			if d.flooding[name] && v.Is4() && v != p.UnderlayIP {
				gone = append(gone, floodEntry(vx.Index, o.VNI, v))
			}
		}
		for v := range after {
			if before[v] {
				continue
			}
			if v.Is4() {
				uses[v]++
			}
			if d.flooding[name] && v.Is4() && v != p.UnderlayIP {
				add = append(add, floodEntry(vx.Index, n.VNI, v))
			}
		}
	}
	slices.SortFunc(gone, compareFDB)
	slices.SortFunc(add, compareFDB)
	if err := errors.Join(d.writeFDBs(gone, add)...); err != nil {
		return err
	}
	d.clock.mark("floods")
	if d.vteps == nil {
		d.vteps = map[netip.Addr]int{}
	}
	want := map[netip.Addr]bool{}
	for v, u := range uses {
		if d.vteps[v] == 0 && u > 0 {
			want[v] = true
		}
		if d.vteps[v] += u; d.vteps[v] <= 0 {
			delete(d.vteps, v)
		}
	}
	for _, name := range nets {
		d.last.plan.Networks[name] = p.Networks[name]
	}
	d.last.plan.Revision = p.Revision
	err := d.resolve(want)
	d.clock.mark("resolve")
	return err
}
