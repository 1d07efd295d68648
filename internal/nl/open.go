package nl

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// real is the kernel of one namespace: a netlink handle opened there and
// the namespace's handle (for nftables, moves into it and threads that
// must enter it).
type real struct {
	path   string
	ns     netns.NsHandle // -1 for the caller's namespace
	h      *netlink.Handle
	writes atomic.Int64
	// raw is a route netlink socket for what the netlink library does
	// not encode (FDB entries' VNIs, bridge VLAN listings), dialed on
	// first use; rawMu orders its requests.
	rawMu sync.Mutex
	raw   *rtnl.Conn
}

// Open returns the real kernel of the network namespace at path (such as
// /run/netns/NAME or /proc/PID/ns/net); "" is the namespace of the
// calling thread. A path that does not exist is an error wrapping
// ErrNoNetNS.
func Open(path string) (Kernel, error) {
	// Route, netfilter and generic (devlink) only: the default set adds
	// NETLINK_XFRM, whose socket fails (EPROTONOSUPPORT) where xfrm_user
	// is not loaded, and Skiff never uses it. A family without a socket
	// here would be asked in the calling thread's namespace instead.
	families := []int{unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER, unix.NETLINK_GENERIC}
	k := &real{path: path, ns: -1}
	var err error
	if path == "" {
		k.h, err = netlink.NewHandle(families...)
	} else {
		k.ns, err = netns.GetFromPath(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("nl: namespace %s: %w", path, ErrNoNetNS)
		}
		if err != nil {
			return nil, fmt.Errorf("nl: namespace %s: %w", path, err)
		}
		k.h, err = netlink.NewHandleAt(k.ns, families...)
	}
	if err != nil {
		if k.ns >= 0 {
			k.ns.Close()
		}
		return nil, fmt.Errorf("nl: netlink handle in %s: %w", where(path), err)
	}
	return k, nil
}

var _ OpenFunc = Open

func where(path string) string {
	if path == "" {
		return "this namespace"
	}
	return path
}

func (k *real) Path() string { return k.path }

func (k *real) Writes() int { return int(k.writes.Load()) }

func (k *real) w() { k.writes.Add(1) }

func (k *real) Close() error {
	k.h.Close()
	k.rawMu.Lock()
	if k.raw != nil {
		_ = k.raw.Close()
		k.raw = nil
	}
	k.rawMu.Unlock()
	if k.ns >= 0 {
		return k.ns.Close()
	}
	return nil
}

// rawDo runs fn with the handle's raw socket, dialed on first use.
func (k *real) rawDo(fn func(c *rtnl.Conn) error) error {
	k.rawMu.Lock()
	defer k.rawMu.Unlock()
	if k.raw == nil {
		c, err := rtnl.Dial(k.path)
		if err != nil {
			return fmt.Errorf("nl: route socket in %s: %w", where(k.path), err)
		}
		k.raw = c
	}
	return fn(k.raw)
}

// nsFd is the namespace's file descriptor: its own, or the calling
// thread's namespace, opened now (close with the returned func).
func (k *real) nsFd() (netns.NsHandle, func(), error) {
	if k.ns >= 0 {
		return k.ns, func() {}, nil
	}
	h, err := netns.Get()
	if err != nil {
		return -1, nil, fmt.Errorf("nl: current namespace: %w", err)
	}
	return h, func() { h.Close() }, nil
}

// dumpRetries bounds how often a dump the kernel interrupted (because the
// table changed while it was read) is started over.
const dumpRetries = 20

// dump runs f again while the kernel reports an interrupted dump, whose
// results may be incomplete.
func dump[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range dumpRetries {
		if v, err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
