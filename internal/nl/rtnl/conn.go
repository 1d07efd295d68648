// Package rtnl is a route netlink socket made for bulk work: many
// requests per sendmsg with the answers matched to them by sequence
// number, dumps read in large messages, and subscriptions that can be
// drained without blocking, so that a caller knows it has seen every
// notification the kernel queued before a given moment.
//
//	c, err := rtnl.Dial("", 0)                        // this namespace, no groups
//	errs, err := c.Do(reqs)                           // one error (or nil) per request
//	err = c.Dump(unix.RTM_GETTFILTER, req, func(h rtnl.Header, b []byte) error { ... })
//	err = c.Get(unix.RTM_GETLINK, req, func(h rtnl.Header, b []byte) error { ... })
//	s, err := rtnl.Dial("/run/netns/n1", unix.RTNLGRP_TC)
//	n, err := s.Drain(func(h rtnl.Header, b []byte) { ... }) // what is queued now
//
// A Conn is not safe for concurrent use, except that Close may be called
// while another goroutine waits in Wait.
package rtnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Header is a netlink message header (struct nlmsghdr).
type Header struct {
	Len   uint32
	Type  uint16
	Flags uint16
	Seq   uint32
	PID   uint32
}

const headerLen = 16

// Buffer sizes: the receive buffer holds the answers to a whole window of
// requests and bursts of notifications; reads take 64 KiB at a time (the
// kernel fills dump messages up to 32 KiB when the reader's buffer is
// that large).
const (
	rcvbuf  = 16 << 20
	sndbuf  = 4 << 20
	readLen = 64 << 10
)

// ErrOverrun is returned by Drain and Wait when the kernel dropped
// notifications because the socket's receive buffer was full (ENOBUFS):
// whatever the caller keeps from notifications must be read again.
var ErrOverrun = errors.New("rtnl: notifications lost (ENOBUFS)")

// errTooLarge: a message did not fit the read buffer, which now fits it.
var errTooLarge = errors.New("did not fit the read buffer")

// ErrDumpInterrupted is returned by Dump when the kernel says the table
// changed while it was read (NLM_F_DUMP_INTR): start over.
var ErrDumpInterrupted = errors.New("rtnl: dump interrupted by a concurrent change")

// Error is the kernel's refusal of one request: the errno and the
// extended acknowledgement's message, when it gave one.
type Error struct {
	Errno   unix.Errno
	Message string
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Errno.Error() + ": " + e.Message
	}
	return e.Errno.Error()
}

// Unwrap makes errors.Is(err, unix.EEXIST) and errors.As(err, &errno) work.
func (e *Error) Unwrap() error { return e.Errno }

// Conn is a NETLINK_ROUTE socket in one network namespace.
type Conn struct {
	f   *os.File
	rc  syscall.RawConn
	pid uint32
	seq uint32
	buf []byte
	// Sent counts messages sent; Received, messages read (answers,
	// dump parts and notifications).
	// Safe to read from any goroutine.
	sent, received atomic.Int64
}

// Dial opens a socket in the network namespace at path (empty: the
// caller's) and joins the given multicast groups (RTNLGRP_*).
func Dial(netns string, groups ...uint32) (*Conn, error) {
	var fd int
	open := func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
		return err
	}
	// A socket belongs to the namespace of the thread that opens it.
	var err error
	if netns == "" {
		err = open()
	} else {
		err = ns.WithNetNSPath(netns, func(ns.NetNS) error { return open() })
	}
	if err != nil {
		return nil, fmt.Errorf("rtnl: socket: %w", err)
	}
	fail := func(what string, err error) (*Conn, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("rtnl: %s: %w", what, err)
	}
	for _, o := range []struct {
		level, opt, v int
		what          string
	}{
		{unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1, "extended acks"},
		{unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1, "capped acks"},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			return fail(o.what, err)
		}
	}
	// Forced sizes need CAP_NET_ADMIN; without it the plain ones (capped
	// by the sysctl limits) are the best there is.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	for _, g := range groups {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g)); err != nil {
			return fail(fmt.Sprintf("joining group %d", g), err)
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	nsa, ok := sa.(*unix.SockaddrNetlink)
	if !ok {
		return fail("getsockname", fmt.Errorf("not a netlink address: %T", sa))
	}
	f := os.NewFile(uintptr(fd), "rtnetlink")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rtnl: %w", err)
	}
	return &Conn{f: f, rc: rc, pid: nsa.Pid, seq: 1, buf: make([]byte, readLen)}, nil
}

// SetReadBuffer sets the socket's receive buffer to n bytes (forced past
// the sysctl limit where the process may, CAP_NET_ADMIN): a subscriber
// that may fall behind a burst of notifications needs more than the 16
// MiB every socket gets. Memory is taken only by what is queued.
func (c *Conn) SetReadBuffer(n int) error {
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		if err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n); err != nil {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, n)
		}
	})
	if cerr != nil {
		return fmt.Errorf("rtnl: receive buffer: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("rtnl: receive buffer: %w", err)
	}
	return nil
}

// Close releases the socket; a Wait in progress returns.
func (c *Conn) Close() error { return c.f.Close() }

// PortID is the socket's netlink port id: the nlmsg_pid of notifications
// about changes this socket asked for.
func (c *Conn) PortID() uint32 { return c.pid }

// Sent is the number of messages sent so far.
func (c *Conn) Sent() int64 { return c.sent.Load() }

// Received is the number of messages read so far.
func (c *Conn) Received() int64 { return c.received.Load() }

func appendHeader(b []byte, h Header) []byte {
	b = binary.NativeEndian.AppendUint32(b, h.Len)
	b = binary.NativeEndian.AppendUint16(b, h.Type)
	b = binary.NativeEndian.AppendUint16(b, h.Flags)
	b = binary.NativeEndian.AppendUint32(b, h.Seq)
	return binary.NativeEndian.AppendUint32(b, h.PID)
}

func parseHeader(b []byte) Header {
	return Header{Len: binary.NativeEndian.Uint32(b), Type: binary.NativeEndian.Uint16(b[4:]),
		Flags: binary.NativeEndian.Uint16(b[6:]), Seq: binary.NativeEndian.Uint32(b[8:]), PID: binary.NativeEndian.Uint32(b[12:])}
}

func align4(n int) int { return (n + 3) &^ 3 }

// send writes b (one or more messages) in one sendmsg.
func (c *Conn) send(b []byte, msgs int) error {
	var serr error
	err := c.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("rtnl: send: %w", err)
	}
	c.sent.Add(int64(msgs))
	return nil
}

// recv reads one datagram, waiting for it unless nowait; it returns
// (nil, nil) when nowait and nothing is queued.
func (c *Conn) recv(nowait bool) ([]byte, error) {
	var n int
	var rerr error
	read := func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), c.buf, unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	}
	var err error
	if nowait {
		err = c.rc.Control(func(fd uintptr) { read(fd) })
	} else {
		err = c.rc.Read(read)
	}
	if err == nil {
		err = rerr
	}
	switch {
	case nowait && err == unix.EAGAIN:
		return nil, nil
	case err == unix.ENOBUFS:
		return nil, ErrOverrun
	case err != nil:
		return nil, fmt.Errorf("rtnl: receive: %w", err)
	case n > len(c.buf):
		// Larger than any message this package asks for: read it
		// whole next time.
		c.buf = make([]byte, align4(n)+readLen)
		return nil, fmt.Errorf("rtnl: a %d-byte message: %w", n, errTooLarge)
	}
	return c.buf[:n], nil
}

// messages calls fn for each message of a datagram.
func (c *Conn) messages(b []byte, fn func(h Header, payload []byte) error) error {
	for len(b) >= headerLen {
		h := parseHeader(b)
		if int(h.Len) < headerLen || int(h.Len) > len(b) {
			return fmt.Errorf("rtnl: message of length %d in %d bytes", h.Len, len(b))
		}
		c.received.Add(1)
		if err := fn(h, b[headerLen:h.Len]); err != nil {
			return err
		}
		b = b[min(align4(int(h.Len)), len(b)):]
	}
	return nil
}

// ackError decodes an NLMSG_ERROR payload: nil for an acknowledgement.
func ackError(h Header, b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("rtnl: short error message")
	}
	code := int32(binary.NativeEndian.Uint32(b))
	if code == 0 {
		return nil
	}
	e := &Error{Errno: unix.Errno(-code)}
	if h.Flags&unix.NLM_F_ACK_TLVS == 0 {
		return e
	}
	// The attributes follow the echoed request: only its header when
	// capped.
	off := 4 + headerLen
	if h.Flags&unix.NLM_F_CAPPED == 0 && len(b) >= 4+headerLen {
		off = 4 + align4(int(binary.NativeEndian.Uint32(b[4:])))
	}
	if off > len(b) {
		return e
	}
	ad := NewDecoder(b[off:])
	for ad.Next() {
		if ad.Type() == unix.NLMSGERR_ATTR_MSG {
			e.Message = ad.String()
		}
	}
	return e
}

// DropFrom makes the kernel drop, before they are queued on this socket,
// the messages whose sender port id (nlmsg_pid) is one of ids: a
// subscriber's filter (SO_ATTACH_FILTER, classic BPF) against the
// notifications of changes made through those sockets, which then cost
// the subscriber no buffer space, wake-up or read. It replaces the filter
// of an earlier call; no ids removes it.
func (c *Conn) DropFrom(ids []uint32) error {
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		if len(ids) == 0 {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
			if errors.Is(err, unix.ENOENT) {
				err = nil // none attached
			}
			return
		}
		var prog []bpf.RawInstruction
		if prog, err = dropProgram(ids); err != nil {
			return
		}
		err = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))})
	})
	if cerr != nil {
		return fmt.Errorf("rtnl: socket filter: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("rtnl: socket filter: %w", err)
	}
	return nil
}

// dropProgram is the filter of DropFrom: load nlmsg_pid, drop it when it
// is one of ids, else accept the message whole.
func dropProgram(ids []uint32) ([]bpf.RawInstruction, error) {
	if len(ids) > 250 {
		return nil, fmt.Errorf("%d port ids: at most 250", len(ids))
	}
	n := uint8(len(ids))
	prog := []bpf.Instruction{bpf.LoadAbsolute{Off: 12, Size: 4}}
	for i, id := range ids {
		// Absolute loads read big-endian; nlmsg_pid is in host order.
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], id)
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(b[:]), SkipTrue: n - uint8(i)})
	}
	prog = append(prog, bpf.RetConstant{Val: 0xffffffff}, bpf.RetConstant{Val: 0})
	return bpf.Assemble(prog)
}
