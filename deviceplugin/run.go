package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// Options configure Run.
type Options struct {
	// Pools is the checked configuration (LoadConfig).
	Pools *PoolsConfig
	// SysRoot is where sysfs is ("/sys"); DevRoot where /dev is
	// ("/dev"). Tests point them at fixture trees.
	SysRoot, DevRoot string
	// PluginDir is where the plugin's sockets go: the kubelet's
	// device-plugins directory (pluginapi.DevicePluginPath), since the
	// kubelet finds a plugin by a socket name relative to it.
	PluginDir string
	// KubeletSocket is the kubelet's registration socket
	// (PluginDir/kubelet.sock).
	KubeletSocket string
	// DevInfoDir is where device-info files go (DefaultDevInfoDir).
	DevInfoDir string
	// Rescan is how often sysfs and devlink are read again (5 s):
	// sysfs gives no inotify events for devices coming and going, so
	// VFs added or removed, links going down and eswitch mode changes
	// are found by this periodic rescan (and at once on a netlink link
	// event when LinkEvents is set).
	Rescan time.Duration
	// SocketCheck is how often the plugin checks that its sockets and
	// the kubelet's are still the ones it registered with (1 s).
	SocketCheck time.Duration
	// GoneHold is how long a VF that disappeared stays advertised as
	// unhealthy before it is dropped (1 min).
	GoneHold time.Duration
	// Devlink reads eswitch modes; the kernel's when nil.
	Devlink eswitch.Devlink
	// LinkEvents, when set, is a source of hints that links changed
	// (each receive triggers a rescan); Run does not close it.
	LinkEvents <-chan struct{}
	Logger     *slog.Logger
}

func (o *Options) defaults() {
	if o.PluginDir == "" {
		o.PluginDir = pluginapi.DevicePluginPath
	}
	if o.KubeletSocket == "" {
		o.KubeletSocket = filepath.Join(o.PluginDir, "kubelet.sock")
	}
	if o.DevInfoDir == "" {
		o.DevInfoDir = DefaultDevInfoDir
	}
	if o.Rescan <= 0 {
		o.Rescan = 5 * time.Second
	}
	if o.SocketCheck <= 0 {
		o.SocketCheck = time.Second
	}
	if o.GoneHold <= 0 {
		o.GoneHold = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// SocketName is the file name of a resource's plugin socket in the
// plugin directory.
func SocketName(resource string) string {
	return "skiff-" + strings.NewReplacer("/", "-", ".", "_").Replace(resource) + ".sock"
}

// server is one pool's gRPC server on its socket.
type server struct {
	pool *pool
	path string
	id   fileID // the socket file, to notice it was replaced
	grpc *grpc.Server
	// registered: the kubelet socket the pool registered with; zero
	// when not registered. registeredAt: when.
	registered   kubeletID
	registeredAt time.Time
}

// Run advertises the configured pools to the kubelet until ctx ends:
// it scans the VFs, serves each pool on its own socket in PluginDir,
// registers it with the kubelet, and keeps both going (rescans,
// re-serving and re-registering when the kubelet restarts). On return
// its sockets and device-info files are removed.
//
// The plugin keeps no allocation state: the kubelet's checkpoint holds
// which pod has which device. Device IDs are PCI addresses, which stay
// the same across restarts, and a VF stays listed (healthy) while its
// netdev is inside a pod's namespace, so after a restart of the plugin
// the kubelet matches its checkpointed allocations against the same IDs
// and never counts a held VF as free.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	if o.Pools == nil || len(o.Pools.Pools) == 0 {
		return errors.New("deviceplugin: no pools configured")
	}
	log := o.Logger
	scanner := NewScanner(o.SysRoot, o.DevRoot, o.Devlink)
	var servers []*server
	for _, pc := range o.Pools.Pools {
		servers = append(servers, &server{pool: newPool(pc, o.DevInfoDir, o.GoneHold, log),
			path: filepath.Join(o.PluginDir, SocketName(pc.ResourceName))})
	}
	var lastProblems string
	rescan := func() error {
		got, problems, err := scanner.Scan(ctx, o.Pools.Pools)
		if err != nil {
			return err
		}
		if s := fmt.Sprint(problems); s != lastProblems {
			for _, p := range problems {
				log.Warn("VF scan problem", "err", p)
			}
			lastProblems = s
		}
		now := time.Now()
		for _, s := range servers {
			if s.pool.update(got[s.pool.cfg.ResourceName], now) {
				list, _ := s.pool.snapshot()
				healthy := 0
				for _, d := range list {
					if d.Health == pluginapi.Healthy {
						healthy++
					}
				}
				log.Info("advertising", "resource", s.pool.cfg.ResourceName, "devices", len(list), "healthy", healthy)
			}
		}
		return nil
	}
	if err := rescan(); err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			s.stop()
			if err := removeDevInfo(o.DevInfoDir, s.pool.cfg.ResourceName); err != nil {
				log.Warn("device-info files left", "resource", s.pool.cfg.ResourceName, "err", err)
			}
		}
	}()
	// The plugin directory is watched with inotify (a new kubelet.sock,
	// a plugin socket removed) and also polled every SocketCheck (the
	// directory may not exist yet, or be replaced).
	var (
		watch *dirWatch
		gen   uint64
	)
	defer func() {
		if watch != nil {
			watch.close()
		}
	}()
	check := func() {
		if watch == nil {
			if w, err := watchDir(o.PluginDir); err == nil {
				watch = w
				gen++ // whatever happened before the watch is unknown
			}
		}
		kubelet := kubeletID{file: identify(o.KubeletSocket), gen: gen}
		for _, s := range servers {
			if s.grpc == nil || identify(s.path) != s.id {
				if s.grpc != nil {
					log.Info("plugin socket gone (kubelet restarted?); serving again", "socket", s.path)
				}
				s.stop()
				if err := s.start(); err != nil {
					log.Error("serve", "resource", s.pool.cfg.ResourceName, "err", err)
					continue
				}
			}
			if kubelet.file != (fileID{}) && s.registered != kubelet {
				// A kubelet refuses a second registration while the
				// first is connected ("device plugin already
				// connected"), and kubelet 1.37 then forgets the first
				// connection too, so it never sees the plugin go (its
				// allocatable stays). Whatever the socket file or
				// inotify say (a late event, a changed ctime), a
				// kubelet that connected since the pool registered and
				// has not dropped its stream holds the registration; a
				// kubelet that died dropped its stream, and the next
				// one gets a new registration. While it is held the
				// decision waits (the next check asks again): a kubelet
				// that restarts quickly can serve its new socket before
				// the plugin's end of the old stream has noticed the
				// close, and that kubelet must still be registered with.
				if s.registered.file != (fileID{}) && s.pool.heldSince(s.registeredAt) {
					continue
				}
				s.registeredAt = time.Now()
				if err := register(ctx, o.KubeletSocket, s); err != nil {
					log.Warn("register with the kubelet", "resource", s.pool.cfg.ResourceName, "socket", o.KubeletSocket, "err", err)
					continue
				}
				s.registered = kubelet
				log.Info("registered with the kubelet", "resource", s.pool.cfg.ResourceName, "endpoint", filepath.Base(s.path))
			}
		}
	}
	check()
	scanT := time.NewTicker(o.Rescan)
	defer scanT.Stop()
	sockT := time.NewTicker(o.SocketCheck)
	defer sockT.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-scanT.C:
		case <-o.LinkEvents:
		case <-sockT.C:
			check()
			continue
		case name, open := <-watchEvents(watch):
			if !open {
				watch.close()
				watch = nil
			} else if name == "" || name == filepath.Base(o.KubeletSocket) {
				gen++
			}
			check()
			continue
		}
		if err := rescan(); err != nil {
			log.Error("VF scan", "err", err)
		}
	}
}

func watchEvents(w *dirWatch) <-chan string {
	if w == nil {
		return nil
	}
	return w.events
}

// fileID tells a file from another that replaced it under the same
// name: its inode and its change time (an inode number is reused at once
// on some file systems).
type fileID struct {
	ino   uint64
	ctime int64
}

// kubeletID tells one kubelet socket from the next: the file, and how
// many times inotify saw one created.
type kubeletID struct {
	file fileID
	gen  uint64
}

// identify a file; the zero fileID when it does not exist.
func identify(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{ino: st.Ino, ctime: st.Ctim.Nano()}
	}
	return fileID{}
}

// start listens on the pool's socket (root only) and serves it.
func (s *server) start() error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deviceplugin: stale socket: %w", err)
	}
	l, err := net.Listen("unix", s.path)
	if err != nil {
		return fmt.Errorf("deviceplugin: listen %s: %w", s.path, err)
	}
	if err := os.Chmod(s.path, 0o600); err != nil {
		_ = l.Close()
		return fmt.Errorf("deviceplugin: %w", err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s.pool)
	go func() { _ = g.Serve(l) }()
	s.grpc, s.id, s.registered = g, identify(s.path), kubeletID{}
	return nil
}

// stop ends the server and removes its socket if it is still its own.
func (s *server) stop() {
	if s.grpc == nil {
		return
	}
	s.grpc.Stop()
	if identify(s.path) == s.id {
		_ = os.Remove(s.path)
	}
	s.grpc, s.id, s.registered = nil, fileID{}, kubeletID{}
}

// register tells the kubelet about a pool's socket.
func register(ctx context.Context, kubeletSocket string, s *server) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("deviceplugin: kubelet %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.path),
		ResourceName: s.pool.cfg.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("deviceplugin: register %s with the kubelet: %w", s.pool.cfg.ResourceName, err)
	}
	return nil
}
