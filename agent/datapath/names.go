package datapath

import (
	"fmt"
	"hash/fnv"
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
