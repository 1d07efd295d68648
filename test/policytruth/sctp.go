package policytruth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Go's net package has no SCTP: these open one-to-one style SCTP sockets
// with raw syscalls and wait on them through the runtime's poller (no
// thread blocked in accept or poll, a listener that closes cleanly). Both
// act in the calling thread's network namespace (run them inside
// ns.WithNetNSPath); the socket keeps that namespace.

// SOL_SCTP and SCTP_RTOINFO of linux/sctp.h (not in x/sys/unix).
const (
	solSCTP     = unix.IPPROTO_SCTP
	sctpRTOInfo = 0
)

// ListenSCTP listens on SCTP at ip:port and accepts and closes every
// association until the returned listener is closed. It fails where the
// kernel has no SCTP.
func ListenSCTP(ip string, port int) (io.Closer, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("sctp listen: %q is not an IPv4 address", ip)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("sctp socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: a.As4()}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sctp bind %s:%d: %w", ip, port, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sctp listen %s:%d: %w", ip, port, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("sctp %s:%d", ip, port))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		for {
			var c int
			var aerr error
			err := rc.Read(func(fd uintptr) bool {
				c, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC)
				return aerr != unix.EAGAIN
			})
			if err != nil {
				return // closed
			}
			switch {
			case aerr == nil:
				unix.Close(c)
			case aerr != unix.ECONNABORTED && aerr != unix.EINTR:
				time.Sleep(10 * time.Millisecond) // out of descriptors: no busy loop
			}
		}
	}()
	return f, nil
}

// DialSCTP opens an SCTP association to ip:port and closes it; it fails
// when none is established within timeout.
func DialSCTP(ip string, port int, timeout time.Duration) error {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return fmt.Errorf("sctp connect: %q is not an IPv4 address", ip)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return fmt.Errorf("sctp socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("sctp to %s:%d", ip, port))
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	err = rc.Control(func(fd uintptr) {
		// The INIT is sent again after 1 s, not the default 3 s: as a
		// TCP SYN, a lost one is retried within a probe's timeout.
		// struct sctp_rtoinfo {assoc_id, initial, max, min} in ms, 0:
		// unchanged.
		var rto [16]byte
		binary.NativeEndian.PutUint32(rto[4:], 1000)
		if cerr = unix.SetsockoptString(int(fd), solSCTP, sctpRTOInfo, string(rto[:])); cerr != nil {
			cerr = fmt.Errorf("SCTP_RTOINFO: %w", cerr)
			return
		}
		cerr = unix.Connect(int(fd), &unix.SockaddrInet4{Port: port, Addr: a.As4()})
	})
	if err == nil && cerr != nil && !errors.Is(cerr, unix.EINPROGRESS) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sctp connect %s:%d: %w", ip, port, err)
	}
	// As net's connect: writable, then SO_ERROR tells a failure and a
	// peer name an established association (a TCP-style SCTP socket is
	// not writable while its INIT is unanswered).
	if err := f.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	err = rc.Write(func(fd uintptr) bool {
		soerr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
			return true
		case soerr != 0:
			cerr = unix.Errno(soerr)
			return true
		}
		_, err = unix.Getpeername(int(fd))
		cerr = err
		return err == nil
	})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("sctp connect %s:%d: no association within %v", ip, port, timeout)
		}
		return fmt.Errorf("sctp connect %s:%d: %w", ip, port, err)
	}
	if cerr != nil {
		return fmt.Errorf("sctp connect %s:%d: %w", ip, port, cerr)
	}
	return nil
}
