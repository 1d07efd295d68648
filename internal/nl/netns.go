package nl

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
)

// InNetNS runs fn on a thread that sits in the network namespace at path
// (a /var/run/netns/NAME or /proc/PID/ns/net file) and returns fn's error.
// Sockets fn opens stay in that namespace; /proc/sys/net files it opens
// are that namespace's. Goroutines fn starts do not inherit the namespace.
// An empty path runs fn in the caller's namespace. This is Skiff's one way
// of running code inside a namespace (the CNI library's ns.WithNetNSPath).
func InNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	err := ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
	if err != nil {
		return fmt.Errorf("nl: in namespace %s: %w", path, err)
	}
	return nil
}
