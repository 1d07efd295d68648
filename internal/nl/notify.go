package nl

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

func (k *real) TC(sockets int) (tc.Client, error) { return tc.DialWriters(k.path, sockets) }

func (k *real) WatchTC() (tc.Watcher, error) { return tc.NewWatch(k.path) }

func (k *real) LinkChanges() (Changes, error) { return rtnl.Subscribe(k.path, unix.RTNLGRP_LINK) }

// rcvbuf is the receive buffer of Watch's subscription sockets: large
// enough that a bulk change (thousands of FDB entries) does not overflow
// it.
const rcvbuf = 8 << 20

func (k *real) Watch(ctx context.Context, fn func(Event)) error {
	ns, done, err := k.nsFd()
	if err != nil {
		return fmt.Errorf("nl: watch: %w", err)
	}
	defer done()
	stop := make(chan struct{})
	defer close(stop)
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
	if err := netlink.LinkSubscribeWithOptions(links, stop, netlink.LinkSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
		return fmt.Errorf("nl: subscribe links: %w", err)
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, stop, netlink.NeighSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
		return fmt.Errorf("nl: subscribe neighbours: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true}); err != nil {
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
