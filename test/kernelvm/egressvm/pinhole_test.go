package egressvm

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// replyPinhole is TestOffloadServices' last part: what the node's stack
// routes to a pod is judged by the node, not by an entry the pod's
// representor committed before the node's verdict. c (n1) admits no
// ingress (deny-to-c), out is a host on the underlay.
//   - c reaches out (snat): out's answer, which n1 un-masquerades and
//     sends out of its gateway on a connection it let through, carries
//     the node's reply mark (offload/flower ReplyMark) and passes c's
//     ingress isolation, though c's representor committed nothing;
//   - c's egress allows only the Service range, so n1 refuses c's
//     connection to the ClusterIP after the DNAT (from port 40123); a
//     packet of its reverse 5-tuple forged on the underlay (source the
//     ClusterIP's port 80, to c's port 40123), which n1 routes into the
//     overlay as a new connection, does not reach c: nothing in the
//     network's zone makes it established (before, c's representor had
//     committed the refused connection, and such a packet passed c's
//     ingress rules for up to 120 s);
//   - the same forged packet reaches c once c admits ingress again: the
//     path exists, only c's isolation stops it.
func replyPinhole(t *testing.T, r *guest.Rig, out string, ips map[string]string, diag func() string) {
	const port = 40123
	c, _ := netip.ParseAddr(ips["c"])
	testkit.Serve(t, out, ":8080", "out")
	in(t, out, ipBin, "route", "add", "198.51.100.0/25", "via", "192.0.2.1")
	// n1 filters reverse paths strictly: the forged source is routed
	// back to out.
	in(t, "sksvn1", ipBin, "route", "add", svcWeb+"/32", "via", "192.0.2.250")
	defer in(t, "sksvn1", ipBin, "route", "del", svcWeb+"/32", "via", "192.0.2.250")

	if server, seen, err := testkit.Ask("sksvpc", net.JoinHostPort("192.0.2.250", "8080"), 3*time.Second); err != nil || server != "out" || seen != "192.0.2.1" {
		t.Errorf("c (admitting no ingress) -> out: %q seen from %q, %v; want out seeing n1 (masqueraded)\n%s", server, seen, err, diag())
	} else {
		t.Log("c (admitting no ingress) -> out: answered, seen from 192.0.2.1")
	}

	// What reaches c from the forged source, counted before anything
	// else of c's stack.
	count := filepath.Join(r.Dir, "forged.nft")
	rules := fmt.Sprintf("table inet forged {\n\tchain pre {\n\t\ttype filter hook prerouting priority raw;\n\t\tip saddr %s tcp sport 80 tcp dport %d counter\n\t}\n}\n", svcWeb, port)
	if err := os.WriteFile(count, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	in(t, "sksvpc", guest.NFT, "-f", count)
	forgedSeen := func() int {
		o := in(t, "sksvpc", guest.NFT, "list", "table", "inet", "forged")
		_, after, _ := strings.Cut(o, "packets ")
		var n int
		fmt.Sscan(after, &n)
		return n
	}

	policy := filepath.Join(r.Dir, "c-egress-block.yaml")
	doc := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: c-egress-block, namespace: default}\nspec:\n" +
		"  podSelector: {matchLabels: {app: c}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: 203.0.113.0/24}\n"
	if err := os.WriteFile(policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Ctl.Must("policy", "apply", "-f", policy)
	defer r.Ctl.Must("delete", "policy", "c-egress-block")
	testkit.Eventually(t, "c's egress allows the Service range only", 30*time.Second, func() (bool, string) {
		_, _, errB := testkit.Ask("sksvpc", net.JoinHostPort(ips["b"], "8080"), 3*time.Second)
		return errB != nil, fmt.Sprintf("c -> b directly: %v", errB)
	})
	// The refused connection, from a known port.
	guest.InNetns(t, "sksvpc", func() error {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: c.AsSlice(), Port: port}}
		if conn, err := d.Dial("tcp", net.JoinHostPort(svcWeb, "80")); err == nil {
			conn.Close()
			t.Errorf("c's egress allows only the Service range, yet c connected to %s:80", svcWeb)
		}
		return nil
	})
	forge(t, out, c)
	time.Sleep(time.Second)
	if n := forgedSeen(); n != 0 {
		t.Errorf("a packet forged from %s:80 to c's refused connection's port %d reached c (%d packets): the refused connection left an established entry\n%s", svcWeb, port, n, diag())
	} else {
		t.Logf("the forged reverse packet of c's refused connection did not reach c")
	}

	// The same packet reaches c when c admits ingress.
	r.Ctl.Must("delete", "policy", "deny-to-c")
	testkit.Eventually(t, "c admits ingress again", 30*time.Second, func() (bool, string) {
		_, _, err := testkit.Ask("sksvpa", net.JoinHostPort(ips["c"], "8080"), 3*time.Second)
		return err == nil, fmt.Sprintf("a -> c directly: %v", err)
	})
	forge(t, out, c)
	testkit.Eventually(t, "the forged packet reaches c when c admits ingress", 10*time.Second, func() (bool, string) {
		n := forgedSeen()
		return n == 1, fmt.Sprintf("%d forged packets reached c, want 1", n)
	})
}

// forge sends, from namespace ns, one TCP SYN-ACK from svcWeb:80 to
// dst:40123, through a raw socket (the kernel fills the IP header's
// checksum and length).
func forge(t *testing.T, ns string, dst netip.Addr) {
	t.Helper()
	src := netip.MustParseAddr(svcWeb)
	pkt := make([]byte, 40)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, syscall.IPPROTO_TCP
	s4, d4 := src.As4(), dst.As4()
	copy(pkt[12:16], s4[:])
	copy(pkt[16:20], d4[:])
	tcp := pkt[20:]
	binary.BigEndian.PutUint16(tcp[0:], 80)
	binary.BigEndian.PutUint16(tcp[2:], 40123)
	binary.BigEndian.PutUint32(tcp[4:], 0x53000001)
	binary.BigEndian.PutUint32(tcp[8:], 0x00000001)
	tcp[12], tcp[13] = 5<<4, 0x12 // SYN, ACK
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	// The checksum over the pseudo-header and the segment.
	sum := uint32(0)
	for _, b := range [][]byte{s4[:], d4[:], {0, syscall.IPPROTO_TCP, 0, 20}, tcp} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(tcp[16:], ^uint16(sum))
	guest.InNetns(t, ns, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		return syscall.Sendto(fd, pkt, 0, &syscall.SockaddrInet4{Addr: d4})
	})
}
