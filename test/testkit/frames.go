package testkit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Frames counts the Ethernet frames of one ethertype a device receives
// (and sends: a packet socket sees both), read from a packet socket made
// in the device's namespace. Close it with the test (Listen does).
type Frames struct {
	fd     int
	ifi    int
	ethTyp uint16
}

// ListenFrames opens a packet socket on dev in namespace ns ("" for the
// test's own) for frames of ethertype: a frame that arrives after this
// call is counted by Count.
func ListenFrames(t testing.TB, ns, dev string, ethertype uint16) *Frames {
	t.Helper()
	var f *Frames
	err := inNS(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(ethertype)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethertype), Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		f = &Frames{fd: fd, ifi: ifc.Index, ethTyp: ethertype}
		return nil
	})
	if err != nil {
		t.Fatalf("listening for frames on %s in %s: %v", dev, ns, err)
	}
	t.Cleanup(func() { unix.Close(f.fd) })
	return f
}

// Count reads for d and returns how many frames received (not sent by
// the device) held marker in their payload.
func (f *Frames) Count(marker []byte, d time.Duration) int { return len(f.Matching(marker, d)) }

// Matching reads for d and returns the frames received (not sent by the
// device) that held marker in their payload, whole (Ethernet header on).
func (f *Frames) Matching(marker []byte, d time.Duration) [][]byte {
	var out [][]byte
	deadline := time.Now().Add(d)
	buf := make([]byte, 65536)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return out
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(f.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return out
		}
		m, from, err := unix.Recvfrom(f.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return out
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if bytes.Contains(buf[:m], marker) {
			out = append(out, bytes.Clone(buf[:m]))
		}
	}
}

// SendFrame sends one Ethernet frame from dev in namespace ns: to dst,
// of ethertype, with payload.
func SendFrame(t testing.TB, ns, dev string, dst net.HardwareAddr, ethertype uint16, payload []byte) {
	t.Helper()
	err := inNS(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		frame := append(append(append([]byte{}, dst...), ifc.HardwareAddr...), byte(ethertype>>8), byte(ethertype))
		frame = append(frame, payload...)
		for len(frame) < 60 {
			frame = append(frame, 0)
		}
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6})
	})
	if err != nil {
		t.Fatalf("sending a frame from %s in %s: %v", dev, ns, err)
	}
}

func inNS(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	if err := InNetns(ns, fn); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
