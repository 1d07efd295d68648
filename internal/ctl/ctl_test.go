package ctl

import (
	"bytes"
	"strings"
	"testing"
)

// TestUnknownCommandsFail: at every level, what is not a command of the
// CLI is an error (non-zero exit in skiffctl's main), never help and
// success; help asked for is not an error.
func TestUnknownCommandsFail(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for success
	}{
		{[]string{"endpoint", "delete", "e2"}, `unknown command "delete" for "skiffctl endpoint"; did you mean skiffctl delete endpoint e2?`},
		{[]string{"endpoint"}, "skiffctl endpoint: a subcommand is required: create"},
		{[]string{"bgp", "neighbours"}, `unknown command "neighbours" for "skiffctl bgp"; its subcommands are peers, routes`},
		{[]string{"nosuch"}, `unknown command "nosuch" for "skiffctl"`},
		{[]string{"get", "nodes", "a", "b"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"network", "create"}, "NAME"},
		{[]string{"network", "create", "blue", "--nosuch"}, "unknown flag: --nosuch"},
		{[]string{"endpoint", "--help"}, ""},
		{[]string{"--help"}, ""},
	} {
		var out, errb bytes.Buffer
		root := NewRootCommand(&out, &errb)
		root.SetArgs(tc.args)
		err := root.Execute()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("skiffctl %s: %v", strings.Join(tc.args, " "), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("skiffctl %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
