package ctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ownerCmd sets owner records by hand (an orchestrator adapter sets them
// through the API): skiffctl owner set pod:prod/web-1 --label app=web.
func (o *options) ownerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "owner", Aliases: []string{"owners"}, Short: "Manage owner records (the labels of a pod's endpoints)"}
	var (
		labels          []string
		ns, uid, node   string
		deleted, output string
	)
	set := &cobra.Command{
		Use:   "set OWNER [--label KEY=VALUE]... [--uid UID] [--node NODE]",
		Short: "Create or replace an owner record; the owner's endpoints take its labels",
		Args:  exactArgs(1, "OWNER"),
		RunE: func(_ *cobra.Command, args []string) error {
			ls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			rec := &skiffv1.Owner{Name: args[0], Namespace: ns, Labels: ls, Uid: uid, Node: node}
			if deleted != "" {
				t, err := time.Parse(time.RFC3339, deleted)
				if err != nil {
					return fmt.Errorf("--deleted %q: want an RFC 3339 time", deleted)
				}
				rec.Deleted = timestamppb.New(t)
			}
			return o.call("set owner", func(ctx context.Context, m skiffv1.ManagementServiceClient) error {
				r, err := m.SetOwner(ctx, rec)
				if err != nil {
					return err
				}
				return o.created(output, r, fmt.Sprintf("owner/%s set (revision %d)", r.Name, r.Revision))
			})
		},
	}
	f := set.Flags()
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	f.StringVar(&ns, "namespace", "", "namespace of the owner's endpoints (a pod's: from its name)")
	f.StringVar(&uid, "uid", "", "the orchestrator's uid of the owner")
	f.StringVar(&node, "node", "", "the node the owner runs on")
	f.StringVar(&deleted, "deleted", "", "when the orchestrator deleted the owner (RFC 3339)")
	outputFlag(set, &output, "")
	cmd.AddCommand(set)
	return cmd
}
