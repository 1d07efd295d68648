package nl

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Event is a kernel change seen by Watch.
type Event struct {
	Kind    string // link, neigh or addr
	Index   int    // link index
	Name    string // link name, when known
	Deleted bool
	Addr    netip.Addr // addr events
	// Static is set on neigh events of static or permanent entries (the
	// kind Skiff manages); dynamic entries come and go by themselves.
	Static bool
}

// rcvbuf is the receive buffer of the subscription sockets: large enough
// that a bulk change (thousands of FDB entries) does not overflow it.
const rcvbuf = 8 << 20

// Watch reports link, neighbour and address changes of a namespace (empty:
// the caller's) to fn until ctx ends. fn runs on Watch's goroutine.
func Watch(ctx context.Context, o Options, fn func(Event)) error {
	var ns netns.NsHandle
	if o.NetNS != "" {
		h, err := netns.GetFromPath(o.NetNS)
		if err != nil {
			return fmt.Errorf("nl: watch namespace %s: %w", o.NetNS, err)
		}
		defer h.Close()
		ns = h
	} else {
		h, err := netns.Get()
		if err != nil {
			return fmt.Errorf("nl: watch: current namespace: %w", err)
		}
		defer h.Close()
		ns = h
	}
	done := make(chan struct{})
	defer close(done)
	links := make(chan netlink.LinkUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 256)
	addrs := make(chan netlink.AddrUpdate, 64)
	errc := make(chan error, 3)
	onErr := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
		return fmt.Errorf("nl: subscribe links: %w", err)
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
		return fmt.Errorf("nl: subscribe neighbours: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
		return fmt.Errorf("nl: subscribe addresses: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("nl: watch: %w", err)
		case u, ok := <-links:
			if !ok {
				return fmt.Errorf("nl: link subscription closed")
			}
			fn(Event{Kind: "link", Index: int(u.Index), Name: u.Attrs().Name, Deleted: u.Header.Type == unix.RTM_DELLINK})
		case u, ok := <-neighs:
			if !ok {
				return fmt.Errorf("nl: neighbour subscription closed")
			}
			fn(Event{Kind: "neigh", Index: u.LinkIndex, Deleted: u.Type == unix.RTM_DELNEIGH,
				Static: u.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0})
		case u, ok := <-addrs:
			if !ok {
				return fmt.Errorf("nl: address subscription closed")
			}
			a, _ := netip.AddrFromSlice(u.LinkAddress.IP)
			fn(Event{Kind: "addr", Index: u.LinkIndex, Deleted: !u.NewAddr, Addr: a.Unmap()})
		}
	}
}
