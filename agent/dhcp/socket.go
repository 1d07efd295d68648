package dhcp

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Conn is one port's link: the frames its guest sends, and a way to send
// frames to the guest only. Read blocks until a frame comes or Close is
// called.
type Conn interface {
	Read(b []byte) (int, error)
	Write(frame []byte) error
	Close() error
}

// packetConn is a packet socket bound to one interface.
type packetConn struct {
	f *os.File
}

func (c packetConn) Read(b []byte) (int, error) { return c.f.Read(b) }
func (c packetConn) Close() error               { return c.f.Close() }

func (c packetConn) Write(frame []byte) error {
	_, err := c.f.Write(frame)
	return err
}

// requestFilter accepts IPv4 UDP frames to port 67 that the interface
// received (from the guest), and nothing it sends: a classic BPF program,
// so that the socket copies nothing else.
func requestFilter() ([]unix.SockFilter, error) {
	const drop = 12 // the index of the last instruction
	prog := []bpf.Instruction{
		/* 0 */ bpf.LoadExtension{Num: bpf.ExtType},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: drop - 2},
		/* 2 */ bpf.LoadAbsolute{Off: 12, Size: 2},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: etherIPv4, SkipTrue: drop - 4},
		/* 4 */ bpf.LoadAbsolute{Off: ethHeader + 9, Size: 1},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoUDP, SkipTrue: drop - 6},
		/* 6 */ bpf.LoadAbsolute{Off: ethHeader + 6, Size: 2},
		/* 7 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: drop - 8},
		/* 8 */ bpf.LoadMemShift{Off: ethHeader},
		/* 9 */ bpf.LoadIndirect{Off: ethHeader + 2, Size: 2},
		/* 10 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ServerPort, SkipFalse: 1},
		/* 11 */ bpf.RetConstant{Val: 0xffff},
		/* 12 */ bpf.RetConstant{Val: 0},
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// Listen opens a packet socket on interface ifname of the caller's
// network namespace that receives the DHCPv4 requests arriving from the
// interface's far end (a tap's guest, a representor's VF) before a
// bridge or tc sees them, and sends frames out of the interface (to the
// guest only). It returns the socket and the interface's index.
func Listen(ifname string) (Conn, int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, 0, fmt.Errorf("dhcp: interface %s: %w", ifname, err)
	}
	filter, err := requestFilter()
	if err != nil {
		return nil, 0, fmt.Errorf("dhcp: filter: %w", err)
	}
	// Protocol 0 receives nothing until bound: the filter is in place
	// before the first frame.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("dhcp: packet socket on %s: %w", ifname, err)
	}
	fail := func(what string, err error) (Conn, int, error) {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("dhcp: %s on %s: %w", what, ifname, err)
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		return fail("attach filter", err)
	}
	all := uint16(unix.ETH_P_ALL)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all<<8 | all>>8, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return packetConn{f: os.NewFile(uintptr(fd), "dhcp:"+ifname)}, ifi.Index, nil
}
