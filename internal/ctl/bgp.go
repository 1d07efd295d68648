package ctl

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/skiff-sdn/skiff/internal/tlsconf"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func (o *options) bgpCall(op string, f func(ctx context.Context, c skiffv1.BgpServiceClient) error) error {
	creds, err := tlsconf.Client(o.tlsCA, o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(o.controller, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("controller %s: %w", o.controller, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	return plainError(op, o.controller, f(ctx, skiffv1.NewBgpServiceClient(conn)))
}

func (o *options) bgpCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bgp", Short: "Show the controller's BGP EVPN sessions and routes"}
	var out string
	peers := &cobra.Command{
		Use:   "peers",
		Short: "List BGP sessions",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			return o.bgpCall("bgp peers", func(ctx context.Context, b skiffv1.BgpServiceClient) error {
				r, err := b.ListBgpPeers(ctx, &skiffv1.ListBgpPeersRequest{})
				if err != nil {
					return err
				}
				if out != "table" && out != "" {
					return o.print(out, "bgp", []object{r}, true)
				}
				w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "PEER\tASN\tSTATE\tUP\tRECEIVED\tACCEPTED\tADVERTISED\n")
				for _, p := range r.GetPeers() {
					up := "-"
					if p.GetUpSince() != nil {
						up = time.Since(p.GetUpSince().AsTime()).Round(time.Second).String()
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%d\n", p.GetAddress(), p.GetAsn(), p.GetState(), up, p.GetReceived(), p.GetAccepted(), p.GetAdvertised())
				}
				return w.Flush()
			})
		},
	}
	outputFlag(peers, &out, "table")
	var vni uint32
	var rout string
	routes := &cobra.Command{
		Use:   "routes",
		Short: "List the EVPN table (routes Skiff originates and routes learned from peers)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(rout); err != nil {
				return err
			}
			if vni > 16777215 {
				return fmt.Errorf("--vni: must be 1..16777215, got %d", vni)
			}
			return o.bgpCall("bgp routes", func(ctx context.Context, b skiffv1.BgpServiceClient) error {
				r, err := b.ListBgpRoutes(ctx, &skiffv1.ListBgpRoutesRequest{Vni: vni})
				if err != nil {
					return err
				}
				if rout != "table" && rout != "" {
					return o.print(rout, "bgp", []object{r}, true)
				}
				w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "TYPE\tVNI\tRD\tMAC\tIP/PREFIX\tNEXTHOP\tRT\tFROM\n")
				for _, x := range r.GetRoutes() {
					ip := x.GetIp()
					if x.GetPrefix() != "" {
						ip = x.GetPrefix()
					}
					from := "local"
					if x.GetPeer() != "" {
						from = x.GetPeer()
					}
					fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", x.GetType(), x.GetVni(), x.GetRd(), orDash(x.GetMac()), orDash(ip),
						x.GetNextHop(), strings.Join(x.GetRouteTargets(), ","), from)
				}
				return w.Flush()
			})
		},
	}
	routes.Flags().Uint32Var(&vni, "vni", 0, "only this VNI")
	outputFlag(routes, &rout, "table")
	cmd.AddCommand(peers, routes)
	return cmd
}
