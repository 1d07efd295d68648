package dpuhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/atomicfile"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// placement is where Plumb put an endpoint's VF: what moving a
// re-created VF back into its pod needs beyond the plan.
type placement struct {
	NetNS  string `json:"netns"`
	IfName string `json:"ifName"`
	MTU    int    `json:"mtu,omitempty"`
	// Home is the VF's netdev name in the host when Plumb took it.
	Home string `json:"home"`
}

// stateVersion is the version of the state file's layout.
const stateVersion = 1

type stateFile struct {
	Version int                  `json:"version"`
	VFs     map[string]placement `json:"vfs"`
}

// loadPlacements reads the state file; none (or no file named) is an
// empty state.
func loadPlacements(path string) (map[string]placement, error) {
	put := map[string]placement{}
	if path == "" {
		return put, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return put, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("state file %s: version: %d is not %d", path, st.Version, stateVersion)
	}
	for ep, pl := range st.VFs {
		if pl.NetNS == "" || pl.IfName == "" || pl.Home == "" {
			return nil, fmt.Errorf("state file %s: vfs[%s]: netns, ifName and home are required", path, ep)
		}
		put[ep] = pl
	}
	return put, nil
}

// placed records (or, for the zero placement, forgets) where endpoint's
// VF is, and saves the state file (atomicfile: a crash leaves the old
// state or the new, whole and on disk).
func (d *Datapath) placed(endpoint string, pl placement) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.put[endpoint]; ok && old == pl || !ok && pl == (placement{}) {
		return nil
	}
	if pl == (placement{}) {
		delete(d.put, endpoint)
	} else {
		d.put[endpoint] = pl
	}
	if d.state == "" {
		return nil
	}
	b, err := json.Marshal(stateFile{Version: stateVersion, VFs: d.put})
	if err != nil {
		return fmt.Errorf("dpu-host datapath: state: %w", err)
	}
	if err := atomicfile.WriteWith(filepath.Dir(d.state), filepath.Base(d.state), b, atomicfile.Options{Perm: 0o600, DirPerm: 0o700}); err != nil {
		return fmt.Errorf("dpu-host datapath: state: %w", err)
	}
	return nil
}

// restoreTimeout bounds finding one re-created VF.
const restoreTimeout = 10 * time.Second

// restore moves each VF that is missing from its pod back in: a reset of
// its PF (a DPU reboot) destroyed the netdev in the pod and made a new
// one in the host. A pod whose namespace is gone is left to its CNI DEL
// (and forgotten once its endpoint has left the plan too); an endpoint
// whose VF is in its pod is not touched (no writes).
func (d *Datapath) restore(p plan.Plan) error {
	d.mu.Lock()
	put := maps.Clone(d.put)
	d.mu.Unlock()
	d.moves.Lock()
	defer d.moves.Unlock()
	var errs []error
	for _, ep := range slices.Sorted(maps.Keys(put)) {
		pl := put[ep]
		e, inPlan := p.Local[ep]
		err := d.inPod(pl)
		switch {
		case err == nil:
			continue
		case errors.Is(err, nl.ErrNoNetNS):
			if !inPlan {
				errs = append(errs, d.placed(ep, placement{}))
			}
			continue
		case !errors.Is(err, nl.ErrNoLink):
			errs = append(errs, fmt.Errorf("dpu-host datapath: endpoint %s: %w", ep, err))
			continue
		case !inPlan || e.Kind != plan.KindVF:
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
		out, err := d.plumb(ctx, datapath.PlumbRequest{Endpoint: e, Network: p.Networks[e.Network], NetNS: pl.NetNS, IfName: pl.IfName, MTU: pl.MTU})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("dpu-host datapath: endpoint %s lost its VF (its PF was reset?) and it could not be moved back: %w", ep, err))
			continue
		}
		d.log.Info("VF re-created: moved back into its pod", "endpoint", ep, "vf", out.HostIf, "netns", pl.NetNS, "ifname", pl.IfName)
		if out.HostIf != pl.Home {
			pl.Home = out.HostIf
			errs = append(errs, d.placed(ep, pl))
		}
	}
	return errors.Join(errs...)
}

// inPod says whether the pod of pl holds its interface: nil when it
// does, an error wrapping nl.ErrNoNetNS when the pod's namespace is
// gone, nl.ErrNoLink when the interface is not there.
func (d *Datapath) inPod(pl placement) error {
	pod, err := d.open(pl.NetNS)
	if err != nil {
		return err
	}
	defer pod.Close()
	_, err = pod.LinkByName(pl.IfName)
	return err
}

// WantsLink says whether a link of this name appearing in the host may be
// a VF to move back into its pod (the agent applies at once when it is).
// Safe for concurrent use.
func (d *Datapath) WantsLink(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pl := range d.put {
		if pl.Home == name {
			return true
		}
	}
	return false
}
