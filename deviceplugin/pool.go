package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// pool serves one resource to the kubelet: the device plugin service of
// API v1beta1. Its methods are safe for concurrent use.
type pool struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg        Pool
	log        *slog.Logger
	devInfoDir string
	goneHold   time.Duration

	mu sync.Mutex
	// devs is what is advertised, gone devices held as unhealthy
	// included.
	devs map[string]Device
	// gone: when a device was first missing from a scan.
	gone map[string]time.Time
	// changed is closed (and replaced) when the advertised list changes.
	changed chan struct{}
	// list is the advertised list as last built.
	list []*pluginapi.Device
	// streams counts the ListAndWatch streams open now; optsAt is when
	// a kubelet last asked for the options (it does when it connects),
	// endedAt when a stream last ended (under mu).
	streams         atomic.Int64
	optsAt, endedAt time.Time
}

func newPool(cfg Pool, devInfoDir string, goneHold time.Duration, log *slog.Logger) *pool {
	return &pool{cfg: cfg, log: log.With("resource", cfg.ResourceName), devInfoDir: devInfoDir, goneHold: goneHold,
		devs: map[string]Device{}, gone: map[string]time.Time{}, changed: make(chan struct{})}
}

// update takes a scan of the pool's devices. A device missing from the
// scan is kept, unhealthy, for goneHold after it was first missed (so the
// kubelet sees it turn unhealthy before its capacity drops), then
// dropped. It reports whether the advertised list changed.
func (p *pool) update(scanned []Device, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range scanned {
		seen[d.ID] = true
		if old, ok := p.devs[d.ID]; (ok && (old.Healthy != d.Healthy || old.Reason != d.Reason)) || (!ok && (p.list != nil || !d.Healthy)) {
			p.log.Info("VF state", "vf", d.ID, "pf", d.PF, "index", d.Index, "healthy", d.Healthy, "reason", d.Reason)
		}
		p.devs[d.ID] = d
		delete(p.gone, d.ID)
	}
	for id, d := range p.devs {
		if seen[id] {
			continue
		}
		since, ok := p.gone[id]
		if !ok {
			p.gone[id] = now
			d.Healthy, d.Reason = false, "VF is gone"
			p.devs[id] = d
			p.log.Info("VF gone", "vf", id, "pf", d.PF, "index", d.Index, "dropped after", p.goneHold)
			continue
		}
		if now.Sub(since) >= p.goneHold {
			delete(p.devs, id)
			delete(p.gone, id)
			p.log.Info("VF dropped", "vf", id)
		}
	}
	list := p.buildList()
	if slices.EqualFunc(list, p.list, sameDevice) && p.list != nil {
		return false
	}
	p.list = list
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

func sameDevice(a, b *pluginapi.Device) bool {
	return a.ID == b.ID && a.Health == b.Health && numaOf(a) == numaOf(b)
}

func numaOf(d *pluginapi.Device) int64 {
	if d.Topology == nil || len(d.Topology.Nodes) == 0 {
		return -1
	}
	return d.Topology.Nodes[0].ID
}

func (p *pool) buildList() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(p.devs))
	for _, id := range slices.Sorted(maps.Keys(p.devs)) {
		d := p.devs[id]
		pd := &pluginapi.Device{ID: id, Health: pluginapi.Unhealthy}
		if d.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if d.NUMA >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		out = append(out, pd)
	}
	return out
}

// snapshot returns the advertised list and the channel closed at its
// next change.
func (p *pool) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list, p.changed
}

func (p *pool) devices() map[string]Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.devs)
}

// GetDevicePluginOptions implements the device plugin service.
func (p *pool) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	p.mu.Lock()
	p.optsAt = time.Now()
	p.mu.Unlock()
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the advertised list now and again at every change,
// until the kubelet goes away or the server stops.
func (p *pool) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	p.streams.Add(1)
	defer func() {
		p.mu.Lock()
		p.endedAt = time.Now()
		p.mu.Unlock()
		p.streams.Add(-1)
	}()
	for {
		list, changed := p.snapshot()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: list}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// heldSince reports whether a kubelet connected to the pool after t and
// still is: it has a ListAndWatch stream open, or it asked for the
// options after t (the kubelet does while it takes a registration, before
// it opens its stream) and no stream ended since. A kubelet that died has
// no stream (its connection closed with it).
func (p *pool) heldSince(t time.Time) bool {
	if p.streams.Load() > 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.optsAt.After(t) && !p.endedAt.After(p.optsAt)
}

// GetPreferredAllocation implements the device plugin service (see
// Preferred).
func (p *pool) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	devs := p.devices()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids := Preferred(devs, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate checks that every device is one of the pool's and present,
// writes each one's device-info file and answers, per container, the
// PCIDEVICE_<RESOURCE> variable and, for vfio pools, the device nodes.
// A request naming a device the pool does not have is refused whole.
func (p *pool) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	devs := p.devices()
	p.mu.Lock()
	gone := maps.Clone(p.gone)
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	var chosen [][]Device
	for i, c := range r.ContainerRequests {
		var ds []Device
		for _, id := range c.DevicesIds {
			d, ok := devs[id]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "container request %d: %s has no device %q", i, p.cfg.ResourceName, id)
			}
			if _, isGone := gone[id]; isGone {
				return nil, status.Errorf(codes.FailedPrecondition, "container request %d: %s device %s is gone from the node", i, p.cfg.ResourceName, id)
			}
			if p.cfg.Use == UseVFIO && d.IOMMUGroup == "" {
				return nil, status.Errorf(codes.FailedPrecondition, "container request %d: %s device %s has no IOMMU group", i, p.cfg.ResourceName, id)
			}
			ds = append(ds, d)
		}
		chosen = append(chosen, ds)
	}
	var written []string
	for _, ds := range chosen {
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		var ids []string
		groups := map[string]bool{}
		for _, d := range ds {
			if err := writeDevInfo(p.devInfoDir, p.cfg.ResourceName, d); err != nil {
				// Nothing half-done: the files this call wrote go too.
				for _, f := range written {
					_ = os.Remove(f)
				}
				return nil, status.Errorf(codes.Internal, "%v", err)
			}
			written = append(written, DevInfoPath(p.devInfoDir, p.cfg.ResourceName, d.ID))
			ids = append(ids, d.ID)
			if p.cfg.Use == UseVFIO && !groups[d.IOMMUGroup] {
				if len(groups) == 0 {
					cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"})
				}
				groups[d.IOMMUGroup] = true
				path := "/dev/vfio/" + d.IOMMUGroup
				cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: path, Permissions: "rw"})
			}
		}
		cr.Envs[EnvName(p.cfg.ResourceName)] = strings.Join(ids, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
		p.log.Info("allocated", "vfs", ids)
	}
	return resp, nil
}

// PreStartContainer is not asked for (the options say so).
func (p *pool) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *pool) String() string { return fmt.Sprintf("pool %s", p.cfg.ResourceName) }
