package guest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TapGuest stands in for a hypervisor on a VM port's tap, where qemu
// cannot run (the kernel VM has no KVM, and qemu under qemu is too slow):
// it attaches to the tap named tap in namespace ns as qemu's tap backend
// does (TUNSETIFF on /dev/net/tun), and carries every frame between the
// tap and eth0 of a new namespace guestNS (a veth whose other end, in ns,
// has no address and is not Skiff's), where the test runs the guest's
// own programs (udhcpc, ping, TCP). eth0 gets the guest's MAC and is up.
// Everything is removed when the test ends; the tap stays Skiff's.
func TapGuest(t *testing.T, ns, tap, guestNS, mac string) {
	t.Helper()
	AddNetns(t, guestNS)
	outer := "g" + guestNS
	if len(outer) > 15 {
		outer = outer[:15]
	}
	In(t, ns, IP, "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", guestNS)
	t.Cleanup(func() { _ = exec.Command(IP, "-n", ns, "link", "del", outer).Run() })
	In(t, guestNS, IP, "link", "set", "eth0", "address", mac)
	In(t, guestNS, IP, "link", "set", "eth0", "up")
	// The pump carries frames as they are: a guest's stack must put
	// its checksums in (a veth leaves them to the far end, and neither
	// the packet socket nor the tap without virtio-net headers carries
	// that), as a virtio-net guest without offloads does.
	InNetns(t, guestNS, func() error { return ethtoolSet("eth0", unix.ETHTOOL_STXCSUM, 0) })
	In(t, ns, IP, "link", "set", outer, "up")

	var tapFile *os.File
	InNetns(t, ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		var req [unix.IFNAMSIZ + 64]byte
		copy(req[:], tap)
		*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
			unix.Close(fd)
			return fmt.Errorf("attach to tap %s in %s: %w", tap, ns, e)
		}
		tapFile = os.NewFile(uintptr(fd), "tap "+tap)
		return nil
	})

	var sock int
	InNetns(t, ns, func() error {
		ifi, err := net.InterfaceByName(outer)
		if err != nil {
			return err
		}
		if sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		// Frames eth0 sends arrive on outer as received; outer's own
		// sends (what the tap gave) must not come back.
		err = unix.SetsockoptInt(sock, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		if err == nil {
			err = unix.Bind(sock, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
		}
		if err != nil {
			unix.Close(sock)
			tapFile.Close()
		}
		return err
	})
	sockFile := os.NewFile(uintptr(sock), "packet "+outer)

	var wg sync.WaitGroup
	pump := func(from io.Reader, to io.Writer) {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, err := from.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					t.Logf("tap guest %s: %v", guestNS, err)
				}
				return
			}
			_, _ = to.Write(buf[:n]) // a frame the far side drops is lost, as on a wire
		}
	}
	wg.Add(2)
	go pump(tapFile, sockFile)
	go pump(sockFile, tapFile)
	t.Cleanup(func() {
		tapFile.Close()
		sockFile.Close()
		wg.Wait()
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ethtoolSet sets one ethtool value (ETHTOOL_S*) of a netdev of the
// caller's namespace.
func ethtoolSet(dev string, cmd, val uint32) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// ifreq's ifr_data points at the ethtool_value; both on the heap,
	// which Go does not move.
	v := &struct{ cmd, data uint32 }{cmd, val}
	req := new([unix.IFNAMSIZ + 24]byte)
	copy(req[:], dev)
	*(*unsafe.Pointer)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unsafe.Pointer(v)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req[0])))
	runtime.KeepAlive(v)
	if e != 0 {
		return fmt.Errorf("ethtool %#x on %s: %w", cmd, dev, e)
	}
	return nil
}
