// Package podrestest serves a stand-in kubelet's pod resources API (v1)
// on a unix socket, for tests of its clients.
package podrestest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Serve serves srv on a new unix socket (in a short temporary directory:
// socket paths are limited to 108 bytes) until the test ends, and
// returns the socket's path.
func Serve(t testing.TB, srv api.PodResourcesListerServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterPodResourcesListerServer(s, srv)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock
}
