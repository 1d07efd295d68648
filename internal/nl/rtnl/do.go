package rtnl

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Request is one netlink request: NLM_F_REQUEST is added to Flags.
type Request struct {
	Type  uint16
	Flags uint16 // NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE...
	Data  []byte
}

// Window bounds the requests of one sendmsg, and windowBytes their size
// (below the socket's send buffer, which bounds one sendmsg).
const (
	Window      = 256
	windowBytes = 128 << 10
)

// Do sends reqs in order, many per sendmsg, and returns one entry per
// request: nil when the kernel carried it out, an *Error when it refused
// it. Only the last request of each sendmsg asks for an acknowledgement;
// the kernel handles the messages of one sendmsg in order and answers
// every failure whatever was asked, so the last acknowledgement closes
// the window and every refusal before it is matched to its request by
// sequence number. err is a failure of the socket itself: the requests
// not answered by then carry it too.
func (c *Conn) Do(reqs []Request) (errs []error, err error) {
	errs = make([]error, len(reqs))
	buf := make([]byte, 0, windowBytes+4096)
	for start := 0; start < len(reqs); {
		end, size := start, 0
		for end < len(reqs) && end-start < Window {
			l := headerLen + align4(len(reqs[end].Data))
			if end > start && size+l > windowBytes {
				break
			}
			size += l
			end++
		}
		buf = buf[:0]
		for i := start; i < end; i++ {
			r := reqs[i]
			flags := r.Flags | unix.NLM_F_REQUEST
			if i == end-1 {
				flags |= unix.NLM_F_ACK
			}
			buf = appendHeader(buf, Header{Len: uint32(headerLen + len(r.Data)), Type: r.Type, Flags: flags, Seq: c.seq + uint32(i-start)})
			buf = append(buf, r.Data...)
			for len(buf)%4 != 0 {
				buf = append(buf, 0)
			}
		}
		base := c.seq
		c.seq += uint32(end - start)
		if err := c.send(buf, end-start); err != nil {
			return fill(errs, start, err), err
		}
		if err := c.acks(base, uint32(end-start), errs[start:end]); err != nil {
			return fill(errs, start, err), err
		}
		start = end
	}
	return errs, nil
}

// fill gives every request from start that has no answer the error err.
func fill(errs []error, start int, err error) []error {
	for i := start; i < len(errs); i++ {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// acks reads answers until the one of the window's last request; errs
// gets the refusals of requests base..base+n-1.
func (c *Conn) acks(base, n uint32, errs []error) error {
	return c.until(func(h Header, p []byte) bool {
		if h.Type != unix.NLMSG_ERROR || h.Seq-base >= n {
			return false // not an answer to this window
		}
		errs[h.Seq-base] = ackError(h, p)
		return h.Seq == base+n-1
	})
}

// until hands every message read to fn until fn says it was the last.
func (c *Conn) until(fn func(h Header, p []byte) (last bool)) error {
	for {
		b, err := c.recv(false)
		if err != nil {
			return err
		}
		done := false
		err = c.messages(b, func(h Header, p []byte) error {
			done = fn(h, p) || done
			return nil
		})
		if err != nil || done {
			return err
		}
	}
}

// Dump sends a dump request (NLM_F_DUMP) of type typ with data and calls
// fn for every message of the answer. ErrDumpInterrupted says the
// kernel's table changed meanwhile: fn saw a mix, start over.
func (c *Conn) Dump(typ uint16, data []byte, fn func(h Header, payload []byte) error) error {
	seq := c.seq
	c.seq++
	buf := appendHeader(make([]byte, 0, headerLen+len(data)), Header{Len: uint32(headerLen + len(data)), Type: typ,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: seq})
	if err := c.send(append(buf, data...), 1); err != nil {
		return err
	}
	intr := false
	var fnErr, ackErr error
	err := c.until(func(h Header, p []byte) bool {
		if h.Seq != seq {
			return false
		}
		if h.Flags&unix.NLM_F_DUMP_INTR != 0 {
			intr = true
		}
		switch h.Type {
		case unix.NLMSG_DONE:
			return true
		case unix.NLMSG_ERROR:
			if err := ackError(h, p); err != nil {
				ackErr = fmt.Errorf("rtnl: dump: %w", err)
			}
			return true
		}
		if fnErr == nil {
			fnErr = fn(h, p)
		}
		return false
	})
	if err == nil {
		err = ackErr
	}
	if err != nil {
		return err
	}
	if fnErr != nil {
		return fnErr
	}
	if intr {
		return ErrDumpInterrupted
	}
	return nil
}

// Get sends one request of type typ with data that the kernel answers
// with one message (RTM_GETLINK for one link, say) and calls fn with that
// message; a refusal is returned as an *Error. An answer larger than the
// read buffer is asked for again once, the buffer grown to fit it.
func (c *Conn) Get(typ uint16, data []byte, fn func(h Header, payload []byte) error) error {
	err := c.get(typ, data, fn)
	if errors.Is(err, errTooLarge) {
		err = c.get(typ, data, fn)
	}
	return err
}

func (c *Conn) get(typ uint16, data []byte, fn func(h Header, payload []byte) error) error {
	seq := c.seq
	c.seq++
	buf := appendHeader(make([]byte, 0, headerLen+len(data)), Header{Len: uint32(headerLen + len(data)), Type: typ,
		Flags: unix.NLM_F_REQUEST, Seq: seq})
	if err := c.send(append(buf, data...), 1); err != nil {
		return err
	}
	var answer error
	err := c.until(func(h Header, p []byte) bool {
		if h.Seq != seq {
			return false
		}
		if h.Type == unix.NLMSG_ERROR {
			if answer = ackError(h, p); answer == nil {
				answer = errors.New("rtnl: get: acknowledged with no answer")
			}
			return true
		}
		answer = fn(h, p)
		return true
	})
	if err != nil {
		return err
	}
	return answer
}

// Drain calls fn for every message queued on the socket now, without
// waiting, and returns how many there were. A notification the kernel
// queued before Drain was called is among them. ErrOverrun says some
// were lost.
func (c *Conn) Drain(fn func(h Header, payload []byte)) (int, error) {
	n := 0
	for {
		b, err := c.recv(true)
		if err != nil {
			return n, err
		}
		if b == nil {
			return n, nil
		}
		err = c.messages(b, func(h Header, p []byte) error {
			n++
			fn(h, p)
			return nil
		})
		if err != nil {
			return n, err
		}
	}
}

// Wait blocks until a message is queued (or the kernel reports lost
// notifications, or the socket is closed).
func (c *Conn) Wait() error {
	var perr error
	peek := make([]byte, headerLen)
	err := c.rc.Read(func(fd uintptr) bool {
		_, _, perr = unix.Recvfrom(int(fd), peek, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return perr != unix.EAGAIN
	})
	if err != nil {
		return fmt.Errorf("rtnl: wait: %w", err)
	}
	if perr == unix.ENOBUFS {
		return ErrOverrun
	}
	return nil
}
