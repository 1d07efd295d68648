// Package vmtest proves the kernel VM harness: it runs only inside the VM
// and uses kernel features the development host lacks.
package vmtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

const (
	ipBin = "/usr/sbin/ip" // full paths: busybox's applets shadow PATH
	tcBin = "/usr/sbin/tc"
)

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestKernelIsDebian612(t *testing.T) {
	guest.Require(t)
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if r := strings.TrimSpace(string(b)); !strings.HasPrefix(r, "6.12.") || !strings.HasSuffix(r, "-amd64") {
		t.Fatalf("kernel %q is not Debian's 6.12", r)
	}
}

// TestNetdevsimFlower creates a netdevsim port and a flower rule on it:
// neither exists on the development host's kernel.
func TestNetdevsimFlower(t *testing.T) {
	guest.Require(t)
	ns := guest.NewNetdevsim(t, 21, 1)
	devs := ns.Netdevs(t)
	if len(devs) != 1 {
		t.Fatalf("netdevsim21 netdevs = %v, want 1", devs)
	}
	dev := devs[0]
	run(t, ipBin, "link", "set", dev, "up")
	run(t, tcBin, "qdisc", "add", "dev", dev, "ingress")
	run(t, tcBin, "filter", "add", "dev", dev, "ingress", "protocol", "ip", "pref", "10", "flower",
		"dst_ip", "10.1.2.3", "ip_proto", "tcp", "dst_port", "80", "action", "gact", "drop")
	out := run(t, tcBin, "-s", "filter", "show", "dev", dev, "ingress")
	for _, want := range []string{"flower", "dst_ip 10.1.2.3", "dst_port 80", "gact action drop", "not_in_hw"} {
		if !strings.Contains(out, want) {
			t.Errorf("filter dump lacks %q:\n%s", want, out)
		}
	}
	// netdevsim offloads only cls_bpf: skip_sw must be refused.
	o, err := exec.Command(tcBin, "filter", "add", "dev", dev, "ingress", "protocol", "ip", "pref", "20", "flower", "skip_sw",
		"dst_ip", "10.9.9.9", "action", "gact", "drop").CombinedOutput()
	if err == nil {
		t.Errorf("skip_sw flower accepted by netdevsim:\n%s", o)
	}
}
