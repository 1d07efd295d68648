package kubemem

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	ctlListen  = "127.0.0.1:7400"
	ctlMetrics = "127.0.0.1:7401"
)

// controllerProc is the real skiff-controller binary (make build), with
// its embedded etcd, running in the cluster's underlay namespace, without
// TLS; the adapter runs in the benchmark's process, or in the controller
// when args give it --kubeconfig.
type controllerProc struct {
	pid   int
	mgmt  skiffv1.ManagementServiceClient
	agent skiffv1.AgentServiceClient
	http  *http.Client
}

func startController(b testing.TB, c *cluster.Cluster, args ...string) *controllerProc {
	b.Helper()
	bin, err := filepath.Abs("../../../bin/skiff-controller")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("run make build first: %v", err)
	}
	pid, err := c.StartInUnderlay("skiff-controller", append([]string{bin, "--listen", ctlListen, "--data-dir", filepath.Join(c.Dir, "skiff-data"),
		"--metrics-addr", ctlMetrics, "--pprof", "--log-level", "warn"}, args...)...)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+ctlListen, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return c.DialUnderlay(ctx, "tcp", addr) }),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	p := &controllerProc{pid: pid, mgmt: skiffv1.NewManagementServiceClient(conn), agent: skiffv1.NewAgentServiceClient(conn),
		http: &http.Client{Transport: &http.Transport{DialContext: c.DialUnderlay}, Timeout: time.Minute}}
	testkit.Eventually(b, "the controller answering (see "+c.Dir+"/skiff-controller.log)", time.Minute, testkit.NoError(func() error {
		_, err := p.mgmt.ListNamespaces(b.Context(), &skiffv1.ListRequest{})
		return err
	}))
	return p
}

// heapAlloc is the controller's live heap after a GC: the heap profile
// with gc=1 collects first, and its debug form ends with the MemStats.
func (p *controllerProc) heapAlloc(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ctlMetrics+"/debug/pprof/heap?debug=1&gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("controller heap profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("controller heap profile: %w", err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("controller heap profile: no HeapAlloc line (status %s)", resp.Status)
}

// rss is the controller's resident set.
func (p *controllerProc) rss() (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", p.pid)
}
