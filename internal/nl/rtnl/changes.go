package rtnl

import "fmt"

// Changes is a subscription that tells whether the kernel notified
// anything since it last asked, without decoding and without a
// goroutine: what was queued is read when asked (Any), so a change made
// (and acknowledged) before the call is always seen. Not safe for
// concurrent use.
type Changes struct{ c *Conn }

// Subscribe joins the given multicast groups (RTNLGRP_*) in the network
// namespace at path (empty: the caller's).
func Subscribe(netns string, groups ...uint32) (*Changes, error) {
	c, err := Dial(netns, groups...)
	if err != nil {
		return nil, fmt.Errorf("rtnl: subscribing: %w", err)
	}
	return &Changes{c: c}, nil
}

// Any reports whether a notification was queued since the last call (or
// since Subscribe), and reads them all. Lost notifications (ErrOverrun)
// and an unreadable socket count as changes.
func (s *Changes) Any() bool {
	seen := false
	for range 3 { // an overrun is reported once, then the queue reads on
		n, err := s.c.Drain(func(Header, []byte) {})
		seen = seen || n > 0 || err != nil
		if err == nil {
			return seen
		}
	}
	return true
}

// Close ends the subscription.
func (s *Changes) Close() error { return s.c.Close() }
