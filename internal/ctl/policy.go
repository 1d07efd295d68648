package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spf13/cobra"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func (o *options) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Aliases: []string{"policies", "netpol"}, Short: "Manage network policies (Kubernetes NetworkPolicy)"}
	var file, out string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace the NetworkPolicy documents of FILE (- for stdin), all or none",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(_ *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f is required")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("-f: %w", err)
			}
			return o.call("apply policies", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				r, err := m.ApplyPolicies(ctx, &skiffv1.ApplyPoliciesRequest{Documents: string(data)})
				if err != nil {
					return err
				}
				if out == "json" || out == "yaml" {
					var objs []object
					for _, p := range r.Policies {
						objs = append(objs, p)
					}
					return o.print(out, "policy", objs, false)
				}
				for _, p := range r.Policies {
					fmt.Fprintf(o.stdout, "policy/%s/%s applied\n", p.Namespace, p.Name)
				}
				return nil
			})
		},
	}
	apply.Flags().StringVarP(&file, "file", "f", "", "file with one or more NetworkPolicy documents, - for stdin")
	outputFlag(apply, &out, "")
	cmd.AddCommand(apply, o.explainCmd())
	return cmd
}

func (o *options) explainCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "explain SRC DST PORT/PROTO",
		Short: "Say whether a new flow passes the policies and which policies and rules decide it (SRC, DST: endpoint names or IPs; PROTO: tcp, udp, sctp; or just icmp)",
		Args:  exactArgs(3, "SRC DST PORT/PROTO"),
		RunE: func(_ *cobra.Command, args []string) error {
			req := &skiffv1.ExplainPolicyRequest{Source: args[0], Destination: args[1]}
			if strings.EqualFold(args[2], "icmp") {
				req.Protocol = "ICMP"
			} else {
				port, proto, ok := strings.Cut(args[2], "/")
				n, err := strconv.ParseUint(port, 10, 16)
				if !ok || err != nil || n == 0 {
					return fmt.Errorf("PORT/PROTO: %q is not like 80/tcp, 53/udp or icmp", args[2])
				}
				req.Port, req.Protocol = uint32(n), strings.ToUpper(proto)
			}
			return o.call("explain", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				r, err := m.ExplainPolicy(ctx, req)
				if err != nil {
					return err
				}
				if out == "json" {
					b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(r)
					if err != nil {
						return err
					}
					fmt.Fprintln(o.stdout, string(b))
					return nil
				}
				verdict := "DENIED"
				if r.Allowed {
					verdict = "ALLOWED"
				}
				fmt.Fprintf(o.stdout, "%s %s -> %s %s\n", verdict, args[0], args[1], args[2])
				for _, s := range []struct {
					dir  string
					side *skiffv1.PolicySide
				}{{"egress of " + args[0], r.Egress}, {"ingress of " + args[1], r.Ingress}} {
					switch {
					case s.side.GetEndpoint() == "":
						fmt.Fprintf(o.stdout, "  %s: outside the cluster, no policy applies\n", s.dir)
					case !s.side.GetIsolated():
						fmt.Fprintf(o.stdout, "  %s: not isolated (no policy of this direction selects it): allowed\n", s.dir)
					case s.side.GetAllowed():
						fmt.Fprintf(o.stdout, "  %s: isolated by %s; allowed by %s\n", s.dir, strings.Join(s.side.GetSelectedBy(), ", "), strings.Join(s.side.GetAllowedBy(), ", "))
					default:
						fmt.Fprintf(o.stdout, "  %s: isolated by %s; no rule allows it: denied\n", s.dir, strings.Join(s.side.GetSelectedBy(), ", "))
					}
				}
				return nil
			})
		},
	}
	outputFlag(cmd, &out, "")
	return cmd
}

func (o *options) namespaceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "namespace", Aliases: []string{"ns", "namespaces"}, Short: "Manage namespace labels (what namespaceSelector matches)"}
	label := &cobra.Command{
		Use:   "label NAMESPACE KEY=VALUE... [KEY-]...",
		Short: "Set or remove labels of a namespace",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			return o.call("label namespace", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				labels := map[string]string{}
				list, err := m.ListNamespaces(ctx, &skiffv1.ListRequest{})
				if err != nil {
					return err
				}
				for _, n := range list.Namespaces {
					if n.Name == args[0] {
						for k, v := range n.Labels {
							labels[k] = v
						}
					}
				}
				for _, a := range args[1:] {
					if k, ok := strings.CutSuffix(a, "-"); ok && !strings.Contains(a, "=") {
						delete(labels, k)
						continue
					}
					k, v, ok := strings.Cut(a, "=")
					if !ok || k == "" {
						return fmt.Errorf("label %q: want KEY=VALUE or KEY-", a)
					}
					labels[k] = v
				}
				n, err := m.SetNamespace(ctx, &skiffv1.Namespace{Name: args[0], Labels: labels})
				if err != nil {
					return err
				}
				fmt.Fprintf(o.stdout, "namespace/%s labeled %v\n", n.Name, n.Labels)
				return nil
			})
		},
	}
	cmd.AddCommand(label)
	return cmd
}

// splitPolicyRef reads NAMESPACE/NAME, or NAME in namespace ns.
func splitPolicyRef(s, ns string) (string, string) {
	if a, b, ok := strings.Cut(s, "/"); ok {
		return a, b
	}
	return ns, s
}
