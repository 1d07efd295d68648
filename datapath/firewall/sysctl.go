package firewall

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// enable sets a boolean sysctl to 1, reporting whether it was not.
func enable(k nl.Kernel, name string) (changed bool, err error) {
	v, err := k.Sysctl(name)
	if err != nil {
		return false, err
	}
	if v == "1" {
		return false, nil
	}
	if err := k.SetSysctl(name, "1"); err != nil {
		return false, err
	}
	return true, nil
}

// EnableIPv4Forwarding sets net.ipv4.ip_forward to 1, reporting whether
// it was 0. Idempotent. It is never set back to 0: a Kubernetes node's
// Services and the kubelet need forwarding too.
func EnableIPv4Forwarding(k nl.Kernel) (changed bool, err error) {
	return enable(k, "net/ipv4/ip_forward")
}

// EnableIPv6Forwarding sets net.ipv6.conf.all.forwarding to 1 (which
// sets every interface's forwarding), reporting whether it was 0.
// Idempotent; never set back to 0. With forwarding on, an interface whose
// accept_ra is 1 no longer takes router advertisements (the kernel's
// rule for routers): a node whose own IPv6 address or default route
// comes from SLAAC needs accept_ra=2 on that interface, which is the
// node's to set.
func EnableIPv6Forwarding(k nl.Kernel) (changed bool, err error) {
	return enable(k, "net/ipv6/conf/all/forwarding")
}

// EnableBridgeNetfilter makes bridged IPv4 and IPv6 traffic traverse the
// inet hooks (net.bridge.bridge-nf-call-ip{,6}tables = 1), which policy
// enforcement on a bridge needs, loading br_netfilter first when its
// sysctls are not there (nothing loads it on demand). It writes only
// what is not already 1 (Kubernetes nodes usually have it set).
func EnableBridgeNetfilter(k nl.Kernel) error {
	names := []string{"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"}
	if _, err := k.Sysctl(names[0]); errors.Is(err, fs.ErrNotExist) {
		if err := k.LoadModule("br_netfilter"); err != nil {
			return fmt.Errorf("bridged traffic must reach the policy: %w", err)
		}
	}
	for _, name := range names {
		if _, err := enable(k, name); err != nil {
			return fmt.Errorf("%w (is the br_netfilter module loaded?)", err)
		}
	}
	return nil
}

// SetForwarding sets a device's IPv4 and IPv6 forwarding, writing only
// what differs; a device without IPv6 (disabled on the node or the
// device) has only the IPv4 one.
func SetForwarding(k nl.Kernel, dev string, on bool) error {
	want := "0"
	if on {
		want = "1"
	}
	for _, name := range []string{"net/ipv4/conf/" + dev + "/forwarding", "net/ipv6/conf/" + dev + "/forwarding"} {
		v, err := k.Sysctl(name)
		if errors.Is(err, fs.ErrNotExist) && name[4:8] == "ipv6" {
			continue
		}
		if err != nil {
			return err
		}
		if v == want {
			continue
		}
		if err := k.SetSysctl(name, want); err != nil {
			return err
		}
	}
	return nil
}

// EnableForwarding turns the node's IPv4 forwarding on, and its IPv6
// forwarding too when v6, for a node that routes a network's traffic
// out of the overlay; it says so in log when it changed a setting.
func EnableForwarding(k nl.Kernel, log *slog.Logger, v6 bool) error {
	if changed, err := EnableIPv4Forwarding(k); err != nil {
		return err
	} else if changed {
		log.Info("enabled IPv4 forwarding (net.ipv4.ip_forward=1): a network on this node has egress snat or routed")
	}
	if !v6 {
		return nil
	}
	if changed, err := EnableIPv6Forwarding(k); err != nil {
		return err
	} else if changed {
		log.Warn("enabled IPv6 forwarding (net.ipv6.conf.all.forwarding=1): a network on this node with egress snat or routed has an IPv6 subnet; interfaces with accept_ra=1 no longer take router advertisements (set accept_ra=2 where the node relies on them)")
	}
	return nil
}
