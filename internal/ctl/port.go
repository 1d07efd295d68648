package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// parseLabels turns repeated KEY=VALUE flags into a map (nil when none).
func parseLabels(labels []string) (map[string]string, error) {
	if len(labels) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		out[k] = v
	}
	return out, nil
}

// portCmd is skiffctl port: VM ports, the endpoints a hypervisor attaches
// a VM to (a tap, or a VF bound to vfio-pci).
func (o *options) portCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "port", Aliases: []string{"ports"}, Short: "Manage VM ports (tap devices and vfio VFs on a node)"}
	cmd.AddCommand(o.portCreateCmd(), o.portGetCmd(), o.portListCmd(), o.portDeleteCmd())
	return cmd
}

func (o *options) portCreateCmd() *cobra.Command {
	var (
		r      skiffv1.CreatePortRequest
		labels []string
		vf     int32
		wait   time.Duration
		out    string
	)
	c := &cobra.Command{
		Use:   "create --vm ID --network NET --node NODE [--kind tap|vfio]",
		Short: "Create a VM port and wait until its node has plumbed it",
		Long: `Create a VM port and wait until its node has plumbed it.

Kind tap: a tap device attached to the network; give its name to the
hypervisor (qemu -netdev tap,ifname=NAME,script=no,downscript=no). Kind
vfio: a free VF of the node (or --pf/--vf-index), its MAC, VLAN and spoof
check set through the PF, bound to vfio-pci; give its PCI address to the
hypervisor (qemu -device vfio-pci,host=ADDR). The node's agent answers
the guest's DHCP with the port's address, gateway, MTU and DNS servers.`,
		Args: exactArgs(0, "no argument (flags only)"),
		RunE: func(c *cobra.Command, _ []string) error {
			for _, f := range []string{"vm", "network", "node"} {
				if !c.Flags().Changed(f) {
					return fmt.Errorf("--%s is required", f)
				}
			}
			ls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			r.Labels = ls
			if c.Flags().Changed("vf-index") {
				r.VfIndex = &vf
			}
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.callFor("create port", wait+o.timeout, func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				p, err := m.CreatePort(ctx, &r)
				if err != nil {
					return err
				}
				return o.created(out, p, portLine(p))
			})
		},
	}
	f := c.Flags()
	f.StringVar(&r.Vm, "vm", "", "the VM's id ([a-z0-9.-]); the port's owner is vm:ID")
	f.StringVar(&r.Network, "network", "", "network of the port")
	f.StringVar(&r.Node, "node", "", "node that hosts the VM")
	f.StringVar(&r.Kind, "kind", "tap", "tap or vfio")
	f.StringVar(&r.Name, "name", "", "port name (default: VM-N, the VM's first free N)")
	f.StringVar(&r.Mac, "mac", "", "the guest's MAC (default: derived; unique on the network)")
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE for network policy (repeatable)")
	f.StringVar(&r.Namespace, "namespace", "", "namespace for network policy")
	f.StringVar(&r.Pf, "pf", "", "vfio: the PF of the VF to use (default: a free VF is picked)")
	f.Int32Var(&vf, "vf-index", 0, "vfio: the VF's index on --pf")
	f.BoolVar(&r.NoWait, "no-wait", false, "return once stored, without waiting for the node")
	f.DurationVar(&wait, "wait", time.Minute, "how long the controller may wait for the node")
	outputFlag(c, &out, "")
	return c
}

// portLine is what port create prints: what the hypervisor needs.
func portLine(p *skiffv1.Endpoint) string {
	where := "not plumbed yet"
	if st := p.GetPort(); st != nil {
		where = "tap " + st.GetHostIf()
		if p.Kind == "vfio" {
			where = fmt.Sprintf("vfio %s group %s, representor %s", st.GetPciAddress(), st.GetVfioGroup(), st.GetHostIf())
		}
	}
	ips := strings.Join(p.Ips, ",")
	if ips == "" {
		ips = "no address (L2 only)"
	}
	return fmt.Sprintf("port/%s created on node %s: %s, mac %s, %s", p.Name, p.Node, where, p.Mac, ips)
}

func (o *options) portGetCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a VM port (with what its node reported)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.call("get port", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				e, err := m.GetEndpoint(ctx, &skiffv1.GetRequest{Name: args[0]})
				if err != nil {
					return err
				}
				if e.GetPort() == nil && e.Kind != "tap" && e.Kind != "vfio" {
					return fmt.Errorf("%s is an endpoint of kind %s, not a VM port", e.Name, e.Kind)
				}
				if out == "table" {
					return printPorts(o.stdout, []*skiffv1.Endpoint{e})
				}
				return o.print(out, "", []object{e}, true)
			})
		},
	}
	outputFlag(c, &out, "table")
	return c
}

func (o *options) portListCmd() *cobra.Command {
	var out, vm, node string
	c := &cobra.Command{
		Use:   "list [--vm ID] [--node NODE]",
		Short: "List VM ports",
		Args:  exactArgs(0, "no argument (flags only)"),
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.call("list ports", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				l, err := m.ListPorts(ctx, &skiffv1.ListPortsRequest{Vm: vm, Node: node})
				if err != nil {
					return err
				}
				if out == "table" {
					return printPorts(o.stdout, l.Endpoints)
				}
				var objs []object
				for _, e := range l.Endpoints {
					objs = append(objs, e)
				}
				return o.print(out, "", objs, false)
			})
		},
	}
	c.Flags().StringVar(&vm, "vm", "", "only this VM's ports")
	c.Flags().StringVar(&node, "node", "", "only this node's ports")
	outputFlag(c, &out, "table")
	return c
}

func (o *options) portDeleteCmd() *cobra.Command {
	var vm string
	c := &cobra.Command{
		Use:   "delete NAME | --vm ID",
		Short: "Delete a VM port, or every port of a VM",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			r := &skiffv1.DeletePortsRequest{Vm: vm}
			if len(args) == 1 {
				r.Name = args[0]
			}
			if (r.Name == "") == (r.Vm == "") {
				return fmt.Errorf("give a port NAME or --vm ID (not both)")
			}
			return o.call("delete port", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				d, err := m.DeletePorts(ctx, r)
				for _, n := range d.GetDeleted() {
					fmt.Fprintf(o.stdout, "port/%s deleted\n", n)
				}
				return err
			})
		},
	}
	c.Flags().StringVar(&vm, "vm", "", "delete every port of this VM")
	return c
}

func printPorts(w io.Writer, ports []*skiffv1.Endpoint) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVM\tNETWORK\tNODE\tKIND\tMAC\tIPS\tHOST_IF\tPCI\tREADY")
	for _, p := range ports {
		st := p.GetPort()
		ready := "no"
		switch {
		case st.GetReady():
			ready = "yes"
		case st.GetError() != "":
			ready = "error: " + st.GetError()
		case st.GetReason() != "":
			ready = "no: " + st.GetReason()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, orDash(strings.TrimPrefix(p.Owner, "vm:")), p.Network, p.Node, p.Kind,
			p.Mac, orDash(strings.Join(p.Ips, ",")), orDash(st.GetHostIf()), orDash(st.GetPciAddress()), ready)
	}
	return tw.Flush()
}

// callFor is call with a time limit of its own.
func (o *options) callFor(op string, d time.Duration, f func(ctx context.Context, c skiffv1.ManagementServiceClient) error) error {
	saved := o.timeout
	o.timeout = d
	defer func() { o.timeout = saved }()
	return o.call(op, f)
}
