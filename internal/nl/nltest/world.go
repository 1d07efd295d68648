package nltest

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// World is a set of network namespaces with one host namespace (path
// ""), the kernel modules loaded (the host's, shared by every namespace)
// and the netlink port ids given to tc clients. Every method of World,
// NS and the handles it opens is safe for concurrent use: one lock holds
// the whole world.
type World struct {
	mu      sync.Mutex
	spaces  map[string]*NS
	ords    int // namespaces made so far: the next one's ordinal
	modules map[string]bool
	port    uint32 // the last netlink port id given
}

// New returns a world holding only the host namespace, with its lo
// (index 1, up).
func New() *World {
	w := &World{spaces: map[string]*NS{}, modules: map[string]bool{}}
	w.addNS("")
	return w
}

// errClosed is the error of a call on a closed handle.
var errClosed = fmt.Errorf("nltest: the handle is closed: %w", net.ErrClosed)

func (w *World) addNS(path string) *NS {
	n := &NS{w: w, path: path, ord: w.ords, links: map[int]*link{}, routes: map[routeKey]nl.Route{},
		extra: map[string]string{}, devlink: map[string]string{}, probes: map[probeKey]int{}}
	n.sys = defaultSysctls()
	w.ords++
	w.spaces[path] = n
	lo := n.newLink("lo", "device")
	lo.MTU, lo.MAC, lo.loop = 65536, "00:00:00:00:00:00", true
	n.place(lo)
	n.up(lo)
	return n
}

// AddNS creates the namespace at path (such as "/run/netns/pod-a") with
// its own lo (index 1, up) and returns it. It panics when the path is
// taken: a test's setup is wrong.
func (w *World) AddNS(path string) *NS {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.spaces[path]; ok {
		panic(fmt.Sprintf("nltest: namespace %q exists", path))
	}
	return w.addNS(path)
}

// NS returns the namespace at path, or nil when there is none.
func (w *World) NS(path string) *NS {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spaces[path]
}

// DeleteNS destroys the namespace at path as the kernel does when its
// last reference goes: its lo, bridges, VXLAN devices and taps are
// deleted, each veth with its peer (wherever that is), and its
// physical devices (kind "device", such as VFs) go back to the host
// namespace, down, without addresses or master (renamed dev<N> when the
// host has a link of their name). Handles still open on it fail with
// nl.ErrNoNetNS. A path with no namespace is no error; the host
// namespace cannot be deleted (panic).
func (w *World) DeleteNS(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if path == "" {
		panic("nltest: the host namespace cannot be deleted")
	}
	n := w.spaces[path]
	if n == nil {
		return
	}
	delete(w.spaces, path)
	host := w.spaces[""]
	for _, l := range n.sorted() {
		if n.links[l.Index] != l {
			continue // gone with its peer
		}
		if l.Kind == "device" && l.Name != "lo" {
			n.detach(l)
			n.remove(l)
			if host.byName(l.Name) != nil {
				l.Name = host.freeName("dev%d")
			}
			host.place(l)
			continue
		}
		n.deleteLink(l)
	}
	n.dead = true
}

// Modules lists the kernel modules loaded through LoadModule, sorted.
func (w *World) Modules() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for m := range w.modules {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Open is an nl.OpenFunc: a handle on the namespace at path ("": the
// host's). A path with no namespace is an error wrapping nl.ErrNoNetNS.
// Handles of one namespace share its state; each counts its own Writes.
func (w *World) Open(path string) (nl.Kernel, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.spaces[path]
	if n == nil {
		return nil, fmt.Errorf("nltest: namespace %s: %w", path, nl.ErrNoNetNS)
	}
	return &kernel{w: w, ns: n}, nil
}

var _ nl.OpenFunc = (*World)(nil).Open

// MustOpen is Open for a test: a handle on the namespace at path,
// closed when the test ends; an error fails t.
func (w *World) MustOpen(t testing.TB, path string) nl.Kernel {
	t.Helper()
	k, err := w.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// kernel is a handle on one namespace: an nl.Kernel.
type kernel struct {
	w      *World
	ns     *NS
	writes atomic.Int64
	closed atomic.Bool
}

var _ nl.Kernel = (*kernel)(nil)

// lock takes the world's lock for a call of k and returns its namespace,
// or the error of a closed handle or a destroyed namespace (the lock is
// then not held).
func (k *kernel) lock() (*NS, error) {
	if k.closed.Load() {
		return nil, errClosed
	}
	k.w.mu.Lock()
	if k.ns.dead {
		k.w.mu.Unlock()
		return nil, fmt.Errorf("nltest: namespace %s was deleted: %w", k.ns.path, nl.ErrNoNetNS)
	}
	return k.ns, nil
}

// do runs f on k's namespace under the world's lock.
func (k *kernel) do(f func(n *NS) error) error {
	n, err := k.lock()
	if err != nil {
		return err
	}
	defer k.w.mu.Unlock()
	return f(n)
}

// write counts a changing call, as the real handle does (whether or not
// the kernel then takes it).
func (k *kernel) write() { k.writes.Add(1) }

func (k *kernel) Path() string { return k.ns.path }

func (k *kernel) Writes() int { return int(k.writes.Load()) }

// Close marks the handle closed; later calls fail. Closing twice is no
// error.
func (k *kernel) Close() error {
	k.closed.Store(true)
	return nil
}

// peerOf is the namespace of another handle given to k (AddVeth's peer,
// MoveLink's target): a handle of this world, open. The world's lock is
// held.
func (k *kernel) peerOf(what string, other nl.Kernel) (*NS, error) {
	o, ok := other.(*kernel)
	if !ok || o.w != k.w {
		return nil, fmt.Errorf("nltest: %s: the namespace is not a handle of this world (%T)", what, other)
	}
	if o.closed.Load() {
		return nil, fmt.Errorf("nltest: %s: %w", what, errClosed)
	}
	if o.ns.dead {
		return nil, fmt.Errorf("nltest: %s: namespace %s was deleted: %w", what, o.ns.path, nl.ErrNoNetNS)
	}
	return o.ns, nil
}

// where names a namespace in errors, as the real handle does.
func where(path string) string {
	if path == "" {
		return "this namespace"
	}
	return path
}
