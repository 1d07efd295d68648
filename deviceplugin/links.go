package deviceplugin

import (
	"context"
	"log/slog"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// LinkHints watches the links of the caller's network namespace and
// sends on the returned channel (coalesced: at most one pending) when
// one changes, for Options.LinkEvents: a PF's link going down or a VF
// netdev appearing is then seen at once instead of at the next rescan.
// The watch ends with ctx; if it fails, the periodic rescan still runs.
func LinkHints(ctx context.Context, log *slog.Logger) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		k, err := nl.Open("")
		if err == nil {
			defer k.Close()
			err = k.Watch(ctx, func(e nl.Event) {
				if e.Kind != "link" {
					return
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			})
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("link watch ended; VF changes are found by the periodic rescan only", "err", err)
		}
	}()
	return ch
}
