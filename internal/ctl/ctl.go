// Package ctl implements skiffctl, the operator CLI over Skiff's management
// API. main only builds the root command and runs it:
//
//	cmd := ctl.NewRootCommand(os.Stdout, os.Stderr)
//	if err := cmd.Execute(); err != nil { os.Exit(1) }
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/internal/tlsconf"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// DefaultController is the controller address when neither --controller nor
// SKIFF_CONTROLLER is given.
const DefaultController = "127.0.0.1:7400"

type options struct {
	controller string
	timeout    time.Duration
	tlsCA      string
	tlsCert    string
	tlsKey     string
	stdout     io.Writer
	stderr     io.Writer
}

// NewRootCommand returns skiffctl's command tree writing to stdout and
// stderr. Errors are returned, not printed: the caller prints them.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "skiffctl",
		Short:         "Operate a Skiff controller",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	def := os.Getenv("SKIFF_CONTROLLER")
	if def == "" {
		def = DefaultController
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.controller, "controller", def, "controller address host:port (env SKIFF_CONTROLLER)")
	pf.DurationVar(&o.timeout, "timeout", 10*time.Second, "time limit of one call")
	pf.StringVar(&o.tlsCA, "tls-ca", "", "CA that signs the controller's certificate (enables TLS)")
	pf.StringVar(&o.tlsCert, "tls-cert", "", "client certificate for mTLS")
	pf.StringVar(&o.tlsKey, "tls-key", "", "client key for mTLS")
	root.AddCommand(o.networkCmd(), o.subnetCmd(), o.endpointCmd(), o.getCmd(), o.deleteCmd(), o.planCmd(), o.watchCmd(),
		o.policyCmd(), o.namespaceCmd(), o.ownerCmd(), o.bgpCmd(), o.portCmd())
	for _, c := range root.Commands() {
		strict(c)
	}
	return root
}

// strict makes every command group (a command with subcommands and no
// action of its own) refuse what is not one of its subcommands, as
// kubectl does: an unknown subcommand, or none, is an error (non-zero
// exit), never the help page and success.
func strict(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strict(sub)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		if len(args) == 0 {
			return fmt.Errorf("%s: a subcommand is required: %s (see %s --help)", c.CommandPath(), strings.Join(names, ", "), c.CommandPath())
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if verb, _, err := c.Root().Find([]string{args[0]}); err == nil && verb != c.Root() && c.Parent() == c.Root() {
			// skiffctl endpoint delete e2: the verb comes first.
			msg += fmt.Sprintf("; did you mean %s %s %s?", c.Root().Name(), args[0], strings.Join(append([]string{c.Name()}, args[1:]...), " "))
		} else if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %s?", strings.Join(s, " or "))
		} else {
			msg += fmt.Sprintf("; its subcommands are %s", strings.Join(names, ", "))
		}
		return errors.New(msg)
	}
}

// client dials the controller. The connection is lazy: an unreachable
// controller shows up as an error of the first call.
func (o *options) client() (skiffv1.ManagementServiceClient, func(), error) {
	creds, err := tlsconf.Client(o.tlsCA, o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(o.controller, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("controller %s: %w", o.controller, err)
	}
	return skiffv1.NewManagementServiceClient(conn), func() { conn.Close() }, nil
}

// call runs f with a client and a timeout, and turns gRPC errors into plain
// messages.
func (o *options) call(op string, f func(ctx context.Context, c skiffv1.ManagementServiceClient) error) error {
	c, done, err := o.client()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	return plainError(op, o.controller, f(ctx, c))
}

func plainError(op, addr string, err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch s.Code().String() {
	case "Unavailable":
		return fmt.Errorf("%s: controller %s is not reachable: %s", op, addr, s.Message())
	case "DeadlineExceeded":
		return fmt.Errorf("%s: no answer from controller %s in time", op, addr)
	}
	return fmt.Errorf("%s: %s", op, s.Message())
}
