package cluster

import (
	"context"
	"net"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// RESTConfig is a client configuration for the API server as the admin,
// usable from the test's own process: its connections are made inside the
// underlay namespace (the API server listens there only).
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: c.Server,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.pki.path("ca"),
			CertFile: c.pki.path("admin"), KeyFile: c.pki.keyPath("admin")},
		Dial: c.dial,
	}
}

// TokenConfig is a client configuration that authenticates with a bearer
// token (a ServiceAccount's), dialling like RESTConfig.
func (c *Cluster) TokenConfig(token string) *rest.Config {
	return &rest.Config{Host: c.Server, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.pki.path("ca")}, Dial: c.dial}
}

// Client is an admin clientset (RESTConfig).
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (c *Cluster) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := testkit.InNetns(c.Underlay, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
