package vf

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// Ref names a VF: its PF's netdev, its index there, its PCI address.
type Ref struct {
	PF    string
	Index int
	PCI   string
}

func (r Ref) String() string { return fmt.Sprintf("VF %d of %s (%s)", r.Index, r.PF, r.PCI) }

// RefsOf lists a discovery's VFs that are PCI functions.
func RefsOf(n *eswitch.Node) []Ref {
	var out []Ref
	for _, pf := range n.PFs {
		for _, v := range pf.VFs {
			if v.PCIAddress != "" {
				out = append(out, Ref{PF: pf.Netdev, Index: v.Index, PCI: v.PCIAddress})
			}
		}
	}
	return out
}

// PodIface is what a VF's netdev becomes inside a pod.
type PodIface struct {
	Name   string           // interface name in the pod (eth0, net1)
	MAC    net.HardwareAddr // set on the netdev too; nil keeps it
	MTU    int              // 0 keeps it
	Addrs  []netip.Prefix
	Routes []nl.LinkRoute
}

// MoverOptions configure a Mover.
type MoverOptions struct {
	// SysRoot is where sysfs is ("/sys"): a VF's netdev in the host
	// namespace is found under bus/pci/devices/<pci>/net. That sysfs must
	// be the host namespace's (sysfs shows the netdevs of the namespace
	// that mounted it).
	SysRoot string
	// Host is the namespace VFs live in when no pod has them, and their
	// PFs (required). A destroyed pod namespace gives its VFs to the
	// init namespace, which is the host's on a node (the agent runs in
	// it).
	Host nl.Kernel
	// Open opens pods' namespaces by path; nl.Open when nil.
	Open nl.OpenFunc
	// ReturnWait bounds how long Detach waits for a VF whose namespace
	// was destroyed to reappear in the host (the kernel returns it
	// asynchronously); 5 s when zero.
	ReturnWait time.Duration
	Logger     *slog.Logger
}

// Mover moves VF netdevs into pod namespaces and gives them back. Calls
// on different VFs may run concurrently; calls on the same VF must not
// (the agent serializes an endpoint's operations).
type Mover struct {
	sys  string
	host nl.Kernel
	open nl.OpenFunc
	mgr  *Manager
	wait time.Duration
	log  *slog.Logger
}

// NewMover returns a Mover.
func NewMover(o MoverOptions) *Mover {
	m := &Mover{sys: strings.TrimRight(o.SysRoot, "/"), host: o.Host, open: o.Open, mgr: NewManager(Options{Netlink: o.Host, Logger: o.Logger}), wait: o.ReturnWait, log: o.Logger}
	if o.SysRoot == "" {
		m.sys = "/sys"
	}
	if m.open == nil {
		m.open = nl.Open
	}
	if m.wait == 0 {
		m.wait = 5 * time.Second
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// PodSettings are what a pod's VF gets through its PF: the endpoint's
// MAC, no VLAN, spoof check on, trust off, link state following the
// uplink.
func PodSettings(mac net.HardwareAddr) Settings {
	return Settings{MAC: mac, VLAN: Ptr(0), QoS: Ptr(0), SpoofCheck: Ptr(true), Trust: Ptr(false), LinkState: Ptr(LinkAuto)}
}

// ZeroMAC is what a VF given back has as its MAC through the PF.
var ZeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// ErrVFAway: the VF's netdev is in no namespace the Mover can see (its
// pod's namespace is being destroyed; the kernel returns it to the init
// namespace when that is done, and Stranded finds it then).
var ErrVFAway = errors.New("VF netdev is in no namespace in reach")

// mark is what the alias of a moved VF netdev records: which VF it is,
// and its name and MTU at home. It travels with the netdev between
// namespaces, so a VF given back by the kernel is still recognised.
type mark struct {
	pci, home string
	mtu       int
}

const markPrefix = "skiff:vf "

func (k mark) String() string {
	return fmt.Sprintf("%spci=%s home=%s mtu=%d", markPrefix, k.pci, k.home, k.mtu)
}

func parseMark(alias string) (mark, bool) {
	rest, ok := strings.CutPrefix(alias, markPrefix)
	if !ok {
		return mark{}, false
	}
	var k mark
	for _, f := range strings.Fields(rest) {
		key, val, _ := strings.Cut(f, "=")
		switch key {
		case "pci":
			k.pci = val
		case "home":
			k.home = val
		case "mtu":
			k.mtu, _ = strconv.Atoi(val)
		}
	}
	return k, k.pci != "" && k.home != ""
}

// validName checks an interface name as the kernel does.
func validName(n string) error {
	if n == "" || len(n) > 15 || n == "." || n == ".." || strings.ContainsAny(n, "/: \t\n") {
		return fmt.Errorf("%q is not an interface name (1-15 characters, no '/', ':' or spaces)", n)
	}
	return nil
}

// hostNetdev is the name of the VF's netdev in the host namespace, from
// sysfs ("" when it has none there).
func (m *Mover) hostNetdev(pci string) (string, error) {
	dir := filepath.Join(m.sys, "bus", "pci", "devices", pci)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("vf: PCI function %s: %w", pci, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "net"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vf: PCI function %s: %w", pci, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

// undoStack runs recorded undo steps in reverse.
type undoStack []func() error

func (u *undoStack) push(f func() error) { *u = append(*u, f) }

func (u undoStack) run(err error) error {
	errs := []error{err}
	for i := len(u) - 1; i >= 0; i-- {
		if e := u[i](); e != nil {
			errs = append(errs, fmt.Errorf("undo: %w", e))
		}
	}
	return errors.Join(errs...)
}
