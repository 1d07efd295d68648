package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

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
	cmd.AddCommand(apply)
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
