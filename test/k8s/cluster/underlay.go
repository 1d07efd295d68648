package cluster

import (
	"context"
	"net"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// StartInUnderlay starts a program of the test's own beside the control
// plane: in the underlay namespace (it reaches the API server at
// APIServerIP and listens where the nodes reach it), in the control
// plane's cgroup, its output in Dir/name.log. Stop ends it with the
// cluster, as the next Start does if the test process dies. It returns
// the program's process id.
func (c *Cluster) StartInUnderlay(name string, args ...string) (int, error) {
	p, err := start(spec{name: name, dir: c.Dir, group: c.rec.Cgroup + "/control",
		enter: []string{"--net=" + testkit.Path(c.Underlay)}, args: args})
	if err != nil {
		return 0, err
	}
	c.procs = append(c.procs, p)
	return p.pid(), nil
}

// DialUnderlay dials addr from inside the underlay namespace, for clients
// in the test process of what runs there (StartInUnderlay).
func (c *Cluster) DialUnderlay(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.dial(ctx, network, addr)
}
