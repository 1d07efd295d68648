package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

type object = proto.Message

func outputFlag(c *cobra.Command, out *string, def string) {
	c.Flags().StringVarP(out, "output", "o", def, "output format: json, yaml or table")
}

func checkOutput(out string) error {
	switch out {
	case "", "json", "yaml", "table":
		return nil
	}
	return fmt.Errorf("--output %q: want json, yaml or table", out)
}

// marshalJSON renders a message with the proto's JSON names (lowerCamelCase).
func marshalJSON(m proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{}.Marshal(m)
}

// render renders objects as JSON: one object when single, else an array.
func render(objs []object, single bool) ([]byte, error) {
	var parts []json.RawMessage
	for _, o := range objs {
		b, err := marshalJSON(o)
		if err != nil {
			return nil, err
		}
		parts = append(parts, b)
	}
	var v any = parts
	if single {
		v = parts[0]
	}
	if parts == nil {
		v = []json.RawMessage{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (o *options) created(out string, obj object, line string) error {
	if err := checkOutput(out); err != nil {
		return err
	}
	if out == "" || out == "table" {
		fmt.Fprintln(o.stdout, line)
		return nil
	}
	return o.print(out, "", []object{obj}, true)
}

func (o *options) print(out, kind string, objs []object, single bool) error {
	switch out {
	case "json", "yaml":
		b, err := render(objs, single)
		if err != nil {
			return err
		}
		if out == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		}
		_, err = o.stdout.Write(b)
		return err
	}
	return printTable(o.stdout, kind, objs)
}

func printTable(w io.Writer, kind string, objs []object) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cols ...any) {
		s := make([]string, len(cols))
		for i, c := range cols {
			s[i] = fmt.Sprint(c)
			if s[i] == "" {
				s[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	}
	switch kind {
	case "network":
		row("NAME", "VNI", "MTU", "EGRESS")
		for _, x := range objs {
			n := x.(*skiffv1.Network)
			mtu := fmt.Sprint(n.Mtu)
			if n.Mtu == 0 {
				mtu = "default"
			}
			row(n.Name, n.Vni, mtu, n.Egress)
		}
	case "subnet":
		row("NAME", "NETWORK", "CIDR", "GATEWAY")
		for _, x := range objs {
			s := x.(*skiffv1.Subnet)
			row(s.Name, s.Network, s.Cidr, s.Gateway)
		}
	case "endpoint":
		row("NAME", "NETWORK", "NODE", "OWNER", "KIND", "MAC", "IPS", "RX_PKTS", "TX_PKTS")
		for _, x := range objs {
			e := x.(*skiffv1.Endpoint)
			rx, tx := "", ""
			if c := e.Counters; c != nil {
				rx, tx = fmt.Sprint(c.RxPackets), fmt.Sprint(c.TxPackets)
			}
			row(e.Name, e.Network, e.Node, e.Owner, e.Kind, e.Mac, strings.Join(e.Ips, ","), rx, tx)
		}
	case "owner":
		row("NAME", "NAMESPACE", "NODE", "UID", "LABELS", "DELETED")
		for _, x := range objs {
			o := x.(*skiffv1.Owner)
			deleted := ""
			if o.Deleted != nil {
				deleted = o.Deleted.AsTime().UTC().Format(time.RFC3339)
			}
			row(o.Name, o.Namespace, o.Node, o.Uid, labelList(o.Labels), deleted)
		}
	case "policy":
		row("NAMESPACE", "NAME", "REVISION")
		for _, x := range objs {
			p := x.(*skiffv1.Policy)
			row(p.Namespace, p.Name, p.Revision)
		}
	case "namespace":
		row("NAME", "LABELS")
		for _, x := range objs {
			n := x.(*skiffv1.Namespace)
			row(n.Name, labelList(n.Labels))
		}
	case "node":
		row("NAME", "UNDERLAY", "MODE", "CONNECTED", "ROLE")
		for _, x := range objs {
			n := x.(*skiffv1.Node)
			row(n.Name, n.UnderlayIp, n.Mode, n.Connected, n.GetCapabilities().GetRole())
		}
	}
	return tw.Flush()
}

// labelList renders labels as sorted KEY=VALUE pairs.
func labelList(l map[string]string) string {
	var ls []string
	for k, v := range l {
		ls = append(ls, k+"="+v)
	}
	slices.Sort(ls)
	return strings.Join(ls, ",")
}

func printPlan(w io.Writer, p *skiffv1.Plan) error {
	fmt.Fprintf(w, "node %s  underlay %s  revision %d\n", p.Node, orDash(p.UnderlayIp), p.Revision)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tVNI\tMTU\tFLOOD VTEPS")
	for _, n := range p.Networks {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", n.Name, n.Vni, n.Mtu, orDash(strings.Join(n.FloodVteps, ",")))
	}
	fmt.Fprintln(tw, "\nLOCAL\tNETWORK\tMAC\tIPS")
	for _, e := range p.LocalEndpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Network, e.Mac, strings.Join(e.Ips, ","))
	}
	fmt.Fprintln(tw, "\nREMOTE\tNETWORK\tMAC\tIPS\tVTEP")
	for _, e := range p.RemoteEndpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Network, e.Mac, strings.Join(e.Ips, ","), e.Vtep)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func getOne(ctx context.Context, m skiffv1.ManagementServiceClient, kind, name string) (object, error) {
	r := &skiffv1.GetRequest{Name: name}
	switch kind {
	case "network":
		return m.GetNetwork(ctx, r)
	case "subnet":
		return m.GetSubnet(ctx, r)
	case "endpoint":
		return m.GetEndpoint(ctx, r)
	case "owner":
		return m.GetOwner(ctx, r)
	default:
		return m.GetNode(ctx, r)
	}
}

func list(ctx context.Context, m skiffv1.ManagementServiceClient, kind, network, node string) ([]object, error) {
	r := &skiffv1.ListRequest{Network: network, Node: node}
	var out []object
	switch kind {
	case "network":
		l, err := m.ListNetworks(ctx, r)
		if err != nil {
			return nil, err
		}
		for _, x := range l.Networks {
			out = append(out, x)
		}
	case "subnet":
		l, err := m.ListSubnets(ctx, r)
		if err != nil {
			return nil, err
		}
		for _, x := range l.Subnets {
			out = append(out, x)
		}
	case "endpoint":
		l, err := m.ListEndpoints(ctx, r)
		if err != nil {
			return nil, err
		}
		for _, x := range l.Endpoints {
			out = append(out, x)
		}
	case "owner":
		l, err := m.ListOwners(ctx, &skiffv1.ListOwnersRequest{Node: node})
		if err != nil {
			return nil, err
		}
		for _, x := range l.Owners {
			out = append(out, x)
		}
	default:
		l, err := m.ListNodes(ctx, r)
		if err != nil {
			return nil, err
		}
		for _, x := range l.Nodes {
			out = append(out, x)
		}
	}
	return out, nil
}

func listPolicyKinds(ctx context.Context, m skiffv1.ManagementServiceClient, kind, namespace string) ([]object, error) {
	var out []object
	if kind == "policy" {
		l, err := m.ListPolicies(ctx, &skiffv1.ListPoliciesRequest{Namespace: namespace})
		if err != nil {
			return nil, err
		}
		for _, x := range l.Policies {
			out = append(out, x)
		}
		return out, nil
	}
	l, err := m.ListNamespaces(ctx, &skiffv1.ListRequest{})
	if err != nil {
		return nil, err
	}
	for _, x := range l.Namespaces {
		out = append(out, x)
	}
	return out, nil
}
