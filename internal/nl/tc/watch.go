package tc

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Watch follows the tc notifications of a network namespace (filters
// and qdiscs; chains are read and not counted) and remembers which devices someone else changed
// (and which of their filters, where it can say):
// every change whose notification does not carry the port id of one of
// the sockets it was told to ignore (Ignore). A goroutine reads the
// notifications as they come, so that the agent's own bulk writes do not
// fill the socket's buffer. Its methods are safe for concurrent use.
type Watch struct {
	c    *rtnl.Conn
	mu   sync.Mutex
	own  map[uint32]bool
	devs map[int]*DeviceChanges
	lost bool // notifications were lost: every device may have changed
	seen int64
	done chan struct{}
}

// watchBuffer is the receive buffer of a Watch's socket.
const watchBuffer = 256 << 20

// NewWatch subscribes to the tc notifications of the network namespace at
// path (empty: the caller's).
func NewWatch(netns string) (*Watch, error) {
	c, err := rtnl.Dial(netns, unix.RTNLGRP_TC)
	if err != nil {
		return nil, fmt.Errorf("tc: subscribing to tc notifications: %w", err)
	}
	// A notification takes about 4 KiB of buffer: the agent's own bulk
	// writes (tens of thousands of filters) would overflow 16 MiB
	// whenever this reader falls behind, and a loss makes the
	// programmers read every device again.
	if err := c.SetReadBuffer(watchBuffer); err != nil {
		c.Close()
		return nil, fmt.Errorf("tc: %w", err)
	}
	w := &Watch{c: c, own: map[uint32]bool{}, devs: map[int]*DeviceChanges{}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

// DropOwn says whether Ignore has the kernel drop the ignored sockets'
// notifications (the default) or lets the watch read and skip them (set
// false only to measure the difference).
var DropOwn = true

// Ignore makes changes made through the sockets of these port ids (the
// agent's own writers: Conn.PortIDs) not count as changes. The kernel
// drops their notifications before they reach the watch's socket
// (rtnl.Conn.DropFrom): the agent's own bulk writes cost the watch no
// reads; one queued before the call is read and not counted.
func (w *Watch) Ignore(portIDs ...uint32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range portIDs {
		w.own[id] = true
	}
	if !DropOwn {
		return nil
	}
	if err := w.c.DropFrom(slices.Sorted(maps.Keys(w.own))); err != nil {
		return fmt.Errorf("tc: ignoring the agent's own notifications: %w", err)
	}
	return nil
}

func (w *Watch) run() {
	defer close(w.done)
	for {
		err := w.c.Wait()
		overrun := errors.Is(err, rtnl.ErrOverrun)
		if err != nil && !overrun {
			return // closed
		}
		w.mu.Lock()
		w.lost = w.lost || overrun
		w.drain()
		w.mu.Unlock()
	}
}

// drain reads what is queued; w.mu is held.
func (w *Watch) drain() {
	_, err := w.c.Drain(func(h rtnl.Header, b []byte) {
		w.seen++
		if w.own[h.PID] || len(b) < 20 {
			return
		}
		// Chain notifications are not counted: the kernel sends them
		// with port id 0 whoever caused them (a chain is made by its
		// first filter and goes with its last, so the agent's own
		// writes cause them too), and they change no filter of their
		// own: every filter a change adds or removes, a chain flushed
		// by `tc chain del` included, has its own filter notification
		// carrying the requester's port id.
		switch h.Type {
		case unix.RTM_NEWTFILTER, unix.RTM_DELTFILTER, unix.RTM_NEWQDISC, unix.RTM_DELQDISC:
			head, err := DecodeHead(b)
			if err != nil {
				w.lost = true
				return
			}
			dc := w.devs[head.Ifindex]
			if dc == nil {
				dc = &DeviceChanges{}
				w.devs[head.Ifindex] = dc
			}
			f, ok := filterChange(h.Type, head, b)
			switch {
			case dc.Whole:
			case !ok || len(dc.Filters) == maxFilterChanges:
				dc.Whole, dc.Filters = true, nil
			default:
				dc.Filters = append(dc.Filters, f)
			}
		}
	})
	if err != nil {
		w.lost = true // lost (ENOBUFS) or unreadable: assume anything changed
	}
}

// FilterChange is one filter someone else added or changed (Delete
// false) or deleted, by its place: chain, priority, protocol (host
// order) and handle.
type FilterChange struct {
	Delete bool
	Chain  uint32
	Prio   uint16
	Proto  uint16
	Handle uint32
}

// DeviceChanges is what someone else changed on one device: the filters
// of Filters, in the order of the notifications; or, when Whole, anything
// of it (a qdisc added or deleted, a whole priority of filters deleted,
// more than maxFilterChanges filters, a notification not understood).
type DeviceChanges struct {
	Whole   bool
	Filters []FilterChange
}

// maxFilterChanges is the most filter changes of one device listed;
// beyond, the device is reported Whole (reading it again is cheaper).
const maxFilterChanges = 64

// filterChange is the filter change of a notification of type typ (its
// head decoded), b its payload; false for what names no single filter
// (a qdisc; a priority's head, handle 0, deleted with all its filters).
func filterChange(typ uint16, head Filter, b []byte) (FilterChange, bool) {
	if (typ != unix.RTM_NEWTFILTER && typ != unix.RTM_DELTFILTER) || head.Handle == 0 {
		return FilterChange{}, false
	}
	f := FilterChange{Delete: typ == unix.RTM_DELTFILTER, Prio: head.Prio, Proto: head.Proto, Handle: head.Handle}
	d := rtnl.NewDecoder(b[20:])
	for d.Next() {
		if d.Type() == unix.TCA_CHAIN {
			f.Chain = d.U32()
		}
	}
	return f, d.Err() == nil
}

// Changed returns the devices (ifindexes) someone else changed since the
// last call, and whether notifications were lost (then any device may
// have changed), and forgets them. Notifications queued by the kernel
// before the call are counted.
func (w *Watch) Changed() (devs map[int]bool, lost bool) {
	changes, lost := w.Changes()
	devs = make(map[int]bool, len(changes))
	for i := range changes {
		devs[i] = true
	}
	return devs, lost
}

// Changes is Changed with what changed on each device.
func (w *Watch) Changes() (devs map[int]DeviceChanges, lost bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	devs = make(map[int]DeviceChanges, len(w.devs))
	for i, dc := range w.devs {
		devs[i] = *dc
	}
	lost = w.lost
	clear(w.devs)
	w.lost = false
	return devs, lost
}

// Notifications is the number of notifications read so far: those of
// ignored sockets only when queued before Ignore.
func (w *Watch) Notifications() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// Close ends the subscription.
func (w *Watch) Close() error {
	err := w.c.Close()
	<-w.done
	return err
}
