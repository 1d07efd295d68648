package datapath

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// AliasPrefix starts the alias of every link a datapath creates; with the
// "sk" name prefix it is how a datapath knows its own links, and it never
// touches a link without both.
const AliasPrefix = "skiff:"

// HostIfName is the name of the host side of a local endpoint's interface
// (the end of its veth pair, or its tap).
func HostIfName(endpoint string) string {
	h := fnv.New32a()
	h.Write([]byte(endpoint))
	return fmt.Sprintf("skp%08x", h.Sum32())
}

// HostIfAlias is the alias that marks a local endpoint's host interface.
func HostIfAlias(endpoint string) string { return AliasPrefix + "ep:" + endpoint }

// GatewayMAC is the MAC of a network's gateway: the same on every node and
// every datapath, so that the gateway address answers everywhere with one
// identity.
func GatewayMAC(vni uint32) string {
	return fmt.Sprintf("02:73:6b:%02x:%02x:%02x", byte(vni>>16), byte(vni>>8), byte(vni))
}

// Mark is the alias of a netdev a datapath took over for an endpoint (a
// VF moved into a pod, an adopted representor): prefix, the endpoint and
// the netdev's own name ("home"), which travel with the netdev.
func Mark(prefix, endpoint, home string) string {
	return fmt.Sprintf("%sep=%s home=%s", prefix, endpoint, home)
}

// ParseMark reads a Mark of prefix; ok is false for any other alias.
func ParseMark(prefix, alias string) (endpoint, home string, ok bool) {
	rest, ok := strings.CutPrefix(alias, prefix)
	if !ok {
		return "", "", false
	}
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "ep":
			endpoint = v
		case "home":
			home = v
		}
	}
	return endpoint, home, endpoint != "" && home != ""
}
