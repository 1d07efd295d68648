// Package cni is skiff-cni, the CNI plugin: a thin client of the node's
// skiff-agent. ADD asks the agent for an endpoint plumbed into the
// container's namespace and prints the CNI result; DEL removes it
// (idempotent); CHECK compares the interface with the previous result;
// STATUS asks whether the agent is ready; GC removes this network's
// endpoints of containers the runtime no longer knows.
//
// Configuration (spec 1.1.0; 0.4.0 and 1.0.0 accepted):
//
//	{"cniVersion": "1.1.0", "name": "blue", "type": "skiff-cni",
//	 "network": "blue", "socket": "/run/skiff/agent.sock", "mtu": 1400,
//	 "labels": {"tier": "web"}}
//
// A pod's VF: the VF's PCI address is "deviceID" in the configuration or
// in "runtimeConfig" (a meta-plugin's), else the kubelet's pod resources
// API is asked which device of "resourceName" (default skiff.io/vf) the
// pod was allocated (K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS;
// socket "podResourcesSocket", default the kubelet's). A pod that holds
// none gets a veth. The agent moves that VF into the pod.
//
//	{..., "resourceName": "skiff.io/vf", "deviceID": "0000:03:00.2"}
//
// An agent elsewhere (the agent on this host's DPU) is reached over the
// local API's TCP transport with mTLS instead of the socket:
//
//	"agent": {"address": "dpu1:7401", "tlsCA": "/etc/skiff/ca.pem",
//	          "tlsCert": "/etc/skiff/node.pem", "tlsKey": "/etc/skiff/node-key.pem"}
package cni

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/deviceplugin/podresources"
	"github.com/skiff-sdn/skiff/internal/nl"
)

// Error codes of the CNI spec that the library does not name.
const (
	errPluginNotAvailable = 50
)

// NetConf is skiff-cni's configuration.
type NetConf struct {
	types.PluginConf
	Network string            `json:"network"`
	Socket  string            `json:"socket"`
	MTU     int               `json:"mtu"`
	Labels  map[string]string `json:"labels"`
	// Agent, when set, is a remote agent reached over TCP with mTLS;
	// Socket is then not used.
	Agent *AgentConf `json:"agent,omitempty"`
	Args  *struct {
		CNI map[string]string `json:"cni"`
	} `json:"args,omitempty"`
	// DeviceID is the pod's VF by PCI address; RuntimeConfig.DeviceID
	// too (a meta-plugin passes it there).
	DeviceID      string `json:"deviceID,omitempty"`
	RuntimeConfig struct {
		DeviceID string `json:"deviceID,omitempty"`
	} `json:"runtimeConfig"`
	// ResourceName is the device plugin resource whose device the
	// kubelet's pod resources API names; PodResourcesSocket that API's
	// socket.
	ResourceName       string `json:"resourceName,omitempty"`
	PodResourcesSocket string `json:"podResourcesSocket,omitempty"`
}

// DefaultResourceName is the VF resource skiff-deviceplugin advertises
// by default.
const DefaultResourceName = "skiff.io/vf"

// AgentConf names an agent served over the local API's TCP transport.
type AgentConf struct {
	Address string `json:"address"`
	TLSCA   string `json:"tlsCA"`
	TLSCert string `json:"tlsCert"`
	TLSKey  string `json:"tlsKey"`
}

// client is the local API client of a configuration; the caller closes it.
func client(conf *NetConf) (*localapi.Client, error) {
	if conf.Agent == nil {
		return localapi.NewClient(conf.Socket), nil
	}
	return localapi.Dial(conf.Agent.Address, localapi.ClientTLS{CA: conf.Agent.TLSCA, Cert: conf.Agent.TLSCert, Key: conf.Agent.TLSKey})
}

// k8sArgs are the CNI_ARGS a kubelet passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS names
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive
	K8S_POD_UID       types.UnmarshallableString //nolint:revive
}

// Main runs the plugin, or with the argument "install" installs it on
// the node (installMain).
func Main() {
	if len(os.Args) > 1 && os.Args[1] == "install" {
		os.Exit(installMain(os.Args[2:], os.Stderr))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, Status: cmdStatus, GC: cmdGC},
		version.PluginSupports("0.4.0", "1.0.0", "1.1.0"), "skiff-cni: Skiff CNI plugin")
}

func loadConf(b []byte, needNetwork bool) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "the network configuration is not valid JSON", err.Error())
	}
	if needNetwork && c.Network == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `"network" is required: the Skiff network to attach to`, "")
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(`"mtu" %d is out of range`, c.MTU), "")
	}
	if c.Socket == "" {
		c.Socket = localapi.DefaultSocket
	}
	if c.ResourceName == "" {
		c.ResourceName = DefaultResourceName
	}
	if c.PodResourcesSocket == "" {
		c.PodResourcesSocket = podresources.DefaultSocket
	}
	if a := c.Agent; a != nil && (a.Address == "" || a.TLSCA == "" || a.TLSCert == "" || a.TLSKey == "") {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `"agent" needs "address", "tlsCA", "tlsCert" and "tlsKey"`, "")
	}
	return &c, nil
}

// EndpointName is the Skiff endpoint of a container's interface: stable
// for the same container and interface, within [a-z0-9.-].
func EndpointName(containerID, ifName string) string {
	h := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "cni-" + hex.EncodeToString(h[:10])
}

// agentError turns a local API error into a CNI error with a code and a
// message a person understands.
func agentError(op string, err error) error {
	var le *localapi.Error
	if !errors.As(err, &le) {
		return types.NewError(types.ErrInternal, op+": "+err.Error(), "")
	}
	code := map[string]uint{
		"invalid": types.ErrInvalidNetworkConfig, "not-found": types.ErrInvalidNetworkConfig,
		"exists": types.ErrInternal, "exhausted": types.ErrTryAgainLater, "unavailable": types.ErrTryAgainLater,
		"forbidden": types.ErrInternal,
	}[le.Code]
	if code == 0 {
		code = types.ErrInternal
	}
	return types.NewError(code, op+": "+le.Message, "")
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 90*time.Second)
}

func cmdAdd(args *skel.CmdArgs) error {
	conf, err := loadConf(args.StdinData, true)
	if err != nil {
		return err
	}
	var ka k8sArgs
	if err := types.LoadArgs(args.Args, &ka); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS: "+err.Error(), "")
	}
	if args.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is required for ADD", "")
	}
	owner := "container:" + args.ContainerID
	if ka.K8S_POD_NAME != "" {
		owner = fmt.Sprintf("pod:%s/%s", ka.K8S_POD_NAMESPACE, ka.K8S_POD_NAME)
	}
	name := EndpointName(args.ContainerID, args.IfName)
	c, cancel := ctx()
	defer cancel()
	cl, err := client(conf)
	if err != nil {
		return agentError("add", err)
	}
	defer cl.Close()
	dev, err := deviceID(c, conf, ka)
	if err != nil {
		return err
	}
	r, err := cl.Create(c, localapi.CreateRequest{
		Name: name, Network: conf.Network, NetNS: args.Netns, IfName: args.IfName, MTU: conf.MTU,
		Labels: conf.Labels, Owner: owner, Namespace: string(ka.K8S_POD_NAMESPACE), DeviceID: dev})
	if err != nil {
		return agentError("add", err)
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	res.Interfaces = []*current.Interface{{Name: r.HostIf}, {Name: r.IfName, Mac: r.MAC, Mtu: r.MTU, Sandbox: args.Netns}}
	one := 1
	for i, ip := range r.IPs {
		p, err := netip.ParsePrefix(ip)
		if err != nil {
			return types.NewError(types.ErrInternal, "agent returned a bad address "+ip, "")
		}
		ipc := &current.IPConfig{Interface: &one, Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if i < len(r.Gateways) && r.Gateways[i] != "" {
			ipc.Gateway = net.ParseIP(r.Gateways[i])
			dst := net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}
			if p.Addr().Is6() {
				dst = net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			}
			res.Routes = append(res.Routes, &types.Route{Dst: dst, GW: ipc.Gateway})
		}
		res.IPs = append(res.IPs, ipc)
	}
	return types.PrintResult(res, conf.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	conf, err := loadConf(args.StdinData, false)
	if err != nil {
		return err
	}
	c, cancel := ctx()
	defer cancel()
	cl, err := client(conf)
	if err != nil {
		return agentError("del", err)
	}
	defer cl.Close()
	if err := cl.DeleteFrom(c, localapi.DeleteRequest{Name: EndpointName(args.ContainerID, args.IfName), NetNS: args.Netns, IfName: args.IfName}); err != nil {
		return agentError("del", err)
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	conf, err := loadConf(args.StdinData, true)
	if err != nil {
		return err
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	c, cancel := ctx()
	defer cancel()
	name := EndpointName(args.ContainerID, args.IfName)
	cl, err := client(conf)
	if err != nil {
		return agentError("check", err)
	}
	defer cl.Close()
	eps, err := cl.List(c)
	if err != nil {
		return agentError("check", err)
	}
	found := false
	for _, e := range eps {
		found = found || (e.Name == name && e.Network == conf.Network)
	}
	if !found {
		return types.NewError(types.ErrInternal, fmt.Sprintf("check: endpoint %s is not on this node's network %s", name, conf.Network), "")
	}
	k, err := nl.Open(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInternal, "check: "+err.Error(), "")
	}
	defer k.Close()
	have, err := nl.Inspect(k, args.IfName)
	if err != nil {
		return types.NewError(types.ErrInternal, "check: "+err.Error(), "")
	}
	for _, i := range prev.Interfaces {
		if i.Sandbox != "" && i.Name == args.IfName && i.Mac != "" && i.Mac != have.MAC {
			return types.NewError(types.ErrInternal, fmt.Sprintf("check: %s has MAC %s, want %s", args.IfName, have.MAC, i.Mac), "")
		}
	}
	for _, ip := range prev.IPs {
		ones, _ := ip.Address.Mask.Size()
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		want := netip.PrefixFrom(a.Unmap(), ones)
		ok := false
		for _, h := range have.Addrs {
			ok = ok || h == want
		}
		if !ok {
			return types.NewError(types.ErrInternal, fmt.Sprintf("check: %s lacks address %s (has %v)", args.IfName, want, have.Addrs), "")
		}
		if ip.Gateway != nil {
			gw, _ := netip.AddrFromSlice(ip.Gateway)
			ok = false
			for _, g := range have.Gateway {
				ok = ok || g == gw.Unmap()
			}
			if !ok {
				return types.NewError(types.ErrInternal, fmt.Sprintf("check: %s has no default route via %s", args.IfName, gw), "")
			}
		}
	}
	return nil
}

func cmdStatus(args *skel.CmdArgs) error {
	conf, err := loadConf(args.StdinData, true)
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client(conf)
	if err != nil {
		return types.NewError(errPluginNotAvailable, "status: "+err.Error(), "")
	}
	defer cl.Close()
	s, err := cl.Status(c)
	if err != nil {
		return types.NewError(errPluginNotAvailable, "status: "+err.Error(), "")
	}
	if !s.Ready {
		return types.NewError(errPluginNotAvailable, "status: skiff-agent is not ready: "+s.Reason, "")
	}
	return nil
}

func cmdGC(args *skel.CmdArgs) error {
	conf, err := loadConf(args.StdinData, true)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[EndpointName(a.ContainerID, a.IfName)] = true
	}
	c, cancel := ctx()
	defer cancel()
	cl, err := client(conf)
	if err != nil {
		return agentError("gc", err)
	}
	defer cl.Close()
	eps, err := cl.List(c)
	if err != nil {
		return agentError("gc", err)
	}
	var errs []error
	for _, e := range eps {
		if e.Network != conf.Network || len(e.Name) < 4 || e.Name[:4] != "cni-" || valid[e.Name] {
			continue
		}
		if err := cl.Delete(c, e.Name); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(os.Stderr, "skiff-cni: gc: removed %s (%s)\n", e.Name, e.Owner)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return agentError("gc", err)
	}
	return nil
}
