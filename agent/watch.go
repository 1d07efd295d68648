package agent

import (
	"context"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// watch turns kernel events into reconciles (someone deleted our bridge:
// it comes back) and reports underlay address changes and new links to the
// controller. A netlink event never patches state; it triggers a resync.
func (a *Agent) watch(ctx context.Context) {
	a.links, a.devs = map[string]bool{}, map[string]bool{}
	if ls, err := a.kernel.Links(); err == nil {
		for _, l := range ls {
			a.links[l.Name] = true
			a.devs[l.Name] = hasDevice(a.cfg.SysRoot, l.Name)
		}
	}
	for ctx.Err() == nil {
		err := a.kernel.Watch(ctx, func(e nl.Event) { a.onEvent(e) })
		if ctx.Err() == nil {
			// Events may have been lost (an overflow): reconcile anyway.
			a.log.Warn("netlink watch ended; restarting and resyncing", "err", err)
			a.resync()
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
}

// linkWanter is a datapath that waits for links to appear: a dpu-host's
// VFs re-created by a reset of their PF, to be moved back into their
// pods (a VF stand-in on a test bench has no device in sysfs).
type linkWanter interface {
	// WantsLink says whether a link named name appearing calls for an
	// Apply. Safe for concurrent use.
	WantsLink(name string) bool
}

func (a *Agent) onEvent(e nl.Event) {
	switch e.Kind {
	case "link":
		if strings.HasPrefix(e.Name, "sk") {
			a.resync()
			return
		}
		switch seen := a.links[e.Name]; {
		case e.Deleted && seen:
			if a.devs[e.Name] || a.namedInCaps(e.Name) {
				a.rediscoverSoon()
			}
			delete(a.links, e.Name)
			delete(a.devs, e.Name)
			a.event("link-removed", e.Name, "")
		case !e.Deleted && !seen && e.Name != "":
			a.links[e.Name] = true
			if a.devs[e.Name] = hasDevice(a.cfg.SysRoot, e.Name); a.devs[e.Name] {
				a.rediscoverSoon()
				// Perhaps a pod's VF the kernel gave back from a dead
				// namespace: the datapath's Apply gives it back home.
				a.resync()
			} else if w, ok := a.dp.(linkWanter); ok && w.WantsLink(e.Name) {
				a.resync()
			}
			a.event("link-added", e.Name, "")
		}
	case "neigh":
		// Skiff's entries are static or permanent; a dynamic entry
		// changing is the kernel's business.
		if e.Static || e.Deleted {
			a.resync()
		}
	case "addr":
		if e.Addr == a.under {
			a.event("underlay-address", e.Addr.String(), map[bool]string{true: "removed", false: "added"}[e.Deleted])
		}
	}
}
