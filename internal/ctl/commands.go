package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func (o *options) networkCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "network", Aliases: []string{"net", "networks"}, Short: "Manage networks"}
	var (
		vni, mtu    uint32
		out, egress string
	)
	create := &cobra.Command{
		Use:   "create NAME --vni N [--mtu M] [--egress none|snat|routed]",
		Short: "Create a network",
		Args:  exactArgs(1, "NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			if !c.Flags().Changed("vni") {
				return fmt.Errorf("--vni is required")
			}
			return o.call("create network", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				n, err := m.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: args[0], Vni: vni, Mtu: mtu, Egress: egress}})
				if err != nil {
					return err
				}
				return o.created(out, n, fmt.Sprintf("network/%s created (vni %d)", n.Name, n.Vni))
			})
		},
	}
	create.Flags().Uint32Var(&vni, "vni", 0, "VXLAN network identifier, 1..16777215")
	create.Flags().Uint32Var(&mtu, "mtu", 0, "MTU seen by endpoints (default 1450)")
	create.Flags().StringVar(&egress, "egress", "", "what leaves the overlay for outside addresses: none (default), snat (masqueraded to the node's address) or routed (the endpoint's own address)")
	outputFlag(create, &out, "")
	cmd.AddCommand(create)
	return cmd
}

func (o *options) subnetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "subnet", Aliases: []string{"subnets"}, Short: "Manage subnets"}
	var (
		network, cidr, gateway, out string
		ranges, excludes, dns       []string
	)
	create := &cobra.Command{
		Use:   "create NAME --network NET --cidr CIDR",
		Short: "Create a subnet on a network",
		Args:  exactArgs(1, "NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			s := &skiffv1.Subnet{Name: args[0], Network: network, Cidr: cidr, Gateway: gateway, Exclusions: excludes, Dns: dns}
			for _, r := range ranges {
				start, end, ok := strings.Cut(r, "-")
				if !ok {
					return fmt.Errorf("--range %q: want START-END", r)
				}
				s.Ranges = append(s.Ranges, &skiffv1.IPRange{Start: start, End: end})
			}
			return o.call("create subnet", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				s, err := m.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: s})
				if err != nil {
					return err
				}
				return o.created(out, s, fmt.Sprintf("subnet/%s created (%s on %s, gateway %s)", s.Name, s.Cidr, s.Network, s.Gateway))
			})
		},
	}
	f := create.Flags()
	f.StringVar(&network, "network", "", "network of the subnet")
	f.StringVar(&cidr, "cidr", "", "prefix, such as 192.0.2.0/24 or 2001:db8::/64")
	f.StringVar(&gateway, "gateway", "", "gateway address (default: the first usable address)")
	f.StringArrayVar(&ranges, "range", nil, "allocation range START-END (repeatable; default: the whole CIDR)")
	f.StringArrayVar(&excludes, "exclude", nil, "address or CIDR never allocated (repeatable)")
	f.StringArrayVar(&dns, "dns", nil, "DNS server handed to VM ports by DHCP (repeatable)")
	outputFlag(create, &out, "")
	cmd.AddCommand(create)
	return cmd
}

func (o *options) endpointCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "endpoint", Aliases: []string{"ep", "endpoints"}, Short: "Manage endpoints"}
	var (
		e        skiffv1.Endpoint
		labels   []string
		vfIndex  int32
		out      string
		ips      []string
		network  string
		node     string
		kind     string
		mac      string
		owner    string
		ns       string
		pf       string
		hasIndex bool
	)
	create := &cobra.Command{
		Use:   "create NAME --network NET --node NODE",
		Short: "Create an endpoint (its IP and MAC are allocated unless given)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			e = skiffv1.Endpoint{Name: args[0], Network: network, Node: node, Kind: kind, Mac: mac, Ips: ips, Owner: owner, Namespace: ns, Pf: pf}
			if hasIndex = c.Flags().Changed("vf-index"); hasIndex {
				e.VfIndex = &vfIndex
			}
			ls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			e.Labels = ls
			return o.call("create endpoint", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				r, err := m.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: &e})
				if err != nil {
					return err
				}
				return o.created(out, r, fmt.Sprintf("endpoint/%s created (%s %s on node %s)", r.Name, r.Mac, strings.Join(r.Ips, ","), r.Node))
			})
		},
	}
	f := create.Flags()
	f.StringVar(&network, "network", "", "network of the endpoint")
	f.StringVar(&node, "node", "", "node that hosts the endpoint")
	f.StringVar(&kind, "kind", "", "veth, vf, tap or vfio (default veth)")
	f.StringVar(&mac, "mac", "", "MAC address (default: derived)")
	f.StringArrayVar(&ips, "ip", nil, "requested address (repeatable; default: allocated)")
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	f.StringVar(&owner, "owner", "", "owner, such as pod:NS/NAME or vm:ID")
	f.StringVar(&ns, "namespace", "", "Kubernetes namespace of the owner")
	f.StringVar(&pf, "pf", "", "PF of a VF endpoint")
	f.Int32Var(&vfIndex, "vf-index", 0, "VF index of a VF endpoint")
	outputFlag(create, &out, "")
	cmd.AddCommand(create)
	return cmd
}

// kinds maps the accepted spellings of object kinds to their canonical name.
var kinds = map[string]string{
	"node": "node", "nodes": "node", "no": "node",
	"network": "network", "networks": "network", "net": "network", "nets": "network",
	"subnet": "subnet", "subnets": "subnet",
	"endpoint": "endpoint", "endpoints": "endpoint", "ep": "endpoint", "eps": "endpoint",
	"policy": "policy", "policies": "policy", "netpol": "policy",
	"namespace": "namespace", "namespaces": "namespace", "ns": "namespace",
	"owner": "owner", "owners": "owner",
}

func kindOf(s string) (string, error) {
	k, ok := kinds[s]
	if !ok {
		return "", fmt.Errorf("unknown kind %q: want nodes, networks, subnets, endpoints, owners, policies or namespaces", s)
	}
	return k, nil
}

func (o *options) getCmd() *cobra.Command {
	var out, network, node, namespace string
	cmd := &cobra.Command{
		Use:   "get nodes|networks|subnets|endpoints|owners|policies|namespaces [NAME]",
		Short: "Show objects (a JSON/YAML array, or one object when NAME is given)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			kind, err := kindOf(args[0])
			if err != nil {
				return err
			}
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.call("get "+kind, func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				if kind == "policy" || kind == "namespace" {
					objs, err := listPolicyKinds(ctx, m, kind, namespace)
					if err != nil {
						return err
					}
					if len(args) == 2 {
						ns, name := splitPolicyRef(args[1], namespace)
						for _, x := range objs {
							if p, ok := x.(*skiffv1.Policy); ok && p.Namespace == ns && p.Name == name {
								return o.print(out, kind, []object{x}, true)
							}
							if n, ok := x.(*skiffv1.Namespace); ok && n.Name == args[1] {
								return o.print(out, kind, []object{x}, true)
							}
						}
						return fmt.Errorf("%s %q does not exist", kind, args[1])
					}
					return o.print(out, kind, objs, false)
				}
				if len(args) == 2 {
					obj, err := getOne(ctx, m, kind, args[1])
					if err != nil {
						return err
					}
					return o.print(out, kind, []object{obj}, true)
				}
				objs, err := list(ctx, m, kind, network, node)
				if err != nil {
					return err
				}
				return o.print(out, kind, objs, false)
			})
		},
	}
	outputFlag(cmd, &out, "table")
	cmd.Flags().StringVar(&network, "network", "", "only endpoints/subnets of this network")
	cmd.Flags().StringVar(&node, "node", "", "only endpoints (owners) of this node")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only policies of this namespace (default for NAME: default)")
	return cmd
}

func (o *options) deleteCmd() *cobra.Command {
	var node, owner, uid string
	var withEndpoints bool
	cmd := &cobra.Command{
		Use: "delete network|subnet|endpoint|node|owner|namespace|policy NAME (policy: NAMESPACE/NAME)\n" +
			"  skiffctl delete endpoints --node NODE | --owner OWNER",
		Short: "Delete an object, or every endpoint of a node or an owner",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			kind, err := kindOf(args[0])
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if kind != "endpoint" || (node == "" && owner == "") {
					return fmt.Errorf("want KIND NAME, or endpoints --node NODE or --owner OWNER")
				}
				return o.call("delete endpoints", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
					r, err := m.DeleteEndpoints(ctx, &skiffv1.DeleteEndpointsRequest{Node: node, Owner: owner})
					if err != nil {
						return err
					}
					for _, e := range r.Deleted {
						fmt.Fprintf(o.stdout, "endpoint/%s deleted\n", e)
					}
					return nil
				})
			}
			if node != "" || owner != "" {
				return fmt.Errorf("--node and --owner go with endpoints and no NAME")
			}
			return o.call("delete "+kind, func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				r := &skiffv1.DeleteRequest{Name: args[1]}
				switch kind {
				case "network":
					_, err = m.DeleteNetwork(ctx, r)
				case "subnet":
					_, err = m.DeleteSubnet(ctx, r)
				case "endpoint":
					_, err = m.DeleteEndpoint(ctx, r)
				case "node":
					_, err = m.DeleteNode(ctx, r)
				case "owner":
					var res *skiffv1.DeleteOwnerResponse
					res, err = m.DeleteOwner(ctx, &skiffv1.DeleteOwnerRequest{Name: args[1], Uid: uid, Endpoints: withEndpoints})
					for _, e := range res.GetEndpoints() {
						fmt.Fprintf(o.stdout, "endpoint/%s deleted\n", e)
					}
				case "namespace":
					_, err = m.DeleteNamespace(ctx, r)
				case "policy":
					ns, name := splitPolicyRef(args[1], "default")
					_, err = m.DeletePolicy(ctx, &skiffv1.PolicyRef{Namespace: ns, Name: name})
				default:
					err = fmt.Errorf("cannot delete a %s", kind)
				}
				if err == nil {
					fmt.Fprintf(o.stdout, "%s/%s deleted\n", kind, args[1])
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", "", "endpoints: every endpoint of this node")
	f.StringVar(&owner, "owner", "", "endpoints: every endpoint of this owner (pod:NS/NAME, vm:ID)")
	f.BoolVar(&withEndpoints, "endpoints", false, "owner: also delete the owner's endpoints")
	f.StringVar(&uid, "uid", "", "owner: only if the record's uid is this")
	return cmd
}

func (o *options) planCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "plan NODE",
		Short: "Show the plan the node receives now",
		Args:  exactArgs(1, "NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.call("plan", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				p, err := m.GetPlan(ctx, &skiffv1.GetPlanRequest{Node: args[0]})
				if err != nil {
					return err
				}
				if out == "table" {
					return printPlan(o.stdout, p)
				}
				return o.print(out, "plan", []object{p}, true)
			})
		},
	}
	outputFlag(cmd, &out, "table")
	return cmd
}

func (o *options) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch [network|subnet|endpoint|node]...",
		Short: "Print changes as JSON lines until interrupted",
		RunE: func(c *cobra.Command, args []string) error {
			req := &skiffv1.WatchRequest{}
			for _, a := range args {
				k, err := kindOf(a)
				if err != nil {
					return err
				}
				req.Kinds = append(req.Kinds, k)
			}
			m, done, err := o.client()
			if err != nil {
				return err
			}
			defer done()
			s, err := m.Watch(c.Context(), req)
			if err != nil {
				return plainError("watch", o.controller, err)
			}
			for {
				ev, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					if c.Context().Err() != nil {
						return nil
					}
					return plainError("watch", o.controller, err)
				}
				b, err := marshalJSON(ev)
				if err != nil {
					return err
				}
				fmt.Fprintln(o.stdout, string(b))
			}
		},
	}
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("want %s, got %d argument(s)", names, len(args))
		}
		return nil
	}
}
