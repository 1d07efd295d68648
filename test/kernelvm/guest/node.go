package guest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// SwitchdevEswitch makes netdevsim device id with one port and vfs VFs
// from inside the named network namespace (so that it lives there,
// devlink instance included), puts its eswitch in switchdev mode, and
// returns the uplink's name (phys_port_name pN). netdevsim allows 4 VFs
// unless told more through its debugfs max_vfs. The device is deleted
// when the test ends.
func SwitchdevEswitch(t *testing.T, ns string, id, vfs int) string {
	t.Helper()
	In(t, ns, "/bin/sh", "-c", fmt.Sprintf("echo '%d 1' > /sys/bus/netdevsim/new_device", id))
	t.Cleanup(func() { _ = os.WriteFile("/sys/bus/netdevsim/del_device", fmt.Appendf(nil, "%d", id), 0) })
	time.Sleep(300 * time.Millisecond)
	if vfs > 4 {
		// debugfs is mounted in the guest's mount namespace, not in the
		// one ip netns exec makes.
		p := fmt.Sprintf("/sys/kernel/debug/netdevsim/netdevsim%d/max_vfs", id)
		if err := os.WriteFile(p, fmt.Appendf(nil, "%d", vfs), 0); err != nil {
			t.Fatalf("netdevsim %d: %v", id, err)
		}
	}
	In(t, ns, "/bin/sh", "-c", fmt.Sprintf("echo %d > /sys/bus/netdevsim/devices/netdevsim%d/sriov_numvfs", vfs, id))
	In(t, ns, "/usr/sbin/devlink", "dev", "eswitch", "set", fmt.Sprintf("netdevsim/netdevsim%d", id), "mode", "switchdev")
	pf := strings.TrimSpace(In(t, ns, "/bin/sh", "-c", "for d in /sys/class/net/*; do case \"$(cat $d/phys_port_name 2>/dev/null)\" in p[0-9]*) basename $d;; esac; done"))
	if pf == "" || strings.Contains(pf, "\n") {
		t.Fatalf("want one netdevsim uplink (phys_port_name pN) in %s, got %q", ns, pf)
	}
	return pf
}

// Representors maps the phys_port_name of each VF representor in the
// named namespace (pf0vf0) to its netdev.
func Representors(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := In(t, ns, "/bin/sh", "-c", "for d in /sys/class/net/*; do echo $(basename $d) $(cat $d/phys_port_name 2>/dev/null); done")
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[1], "pf") && strings.Contains(f[1], "vf") {
			m[f[1]] = f[0]
		}
	}
	return m
}

// HoldNetns starts a process that sits in the named network namespace
// until the test ends and returns /proc/PID/ns/net, a path to the
// namespace that works everywhere: agents run under ip netns exec, in
// mount namespaces of their own, where namespace files bound under
// /var/run/netns in this guest after they started do not show.
func HoldNetns(t *testing.T, ns string) string {
	t.Helper()
	holder := exec.Command(IP, "netns", "exec", ns, "/bin/sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	self, _ := os.Readlink("/proc/self/ns/net")
	path := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	testkit.Eventually(t, ns+" holder in its namespace", 10*time.Second, func() (bool, string) {
		l, err := os.Readlink(path)
		return err == nil && l != self, l
	})
	return path
}
