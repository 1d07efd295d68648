// Package e2e drives Skiff's real binaries: it builds them once, starts them
// as processes and talks to them through their public APIs.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

var binDir string

func TestMain(m *testing.M) {
	if addr := os.Getenv("SKIFF_E2E_LOADER"); addr != "" {
		if err := runLoader(addr); err != nil {
			fmt.Fprintln(os.Stderr, "loader:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	removeDeadBinDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("skiff-e2e-bin-%d-", os.Getpid()))
	if err != nil {
		panic(err)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+"/", "../../cmd/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	// cnitool from the CNI project, built from the module this repository
	// already depends on.
	tool := exec.Command("go", "build", "-o", dir+"/cnitool", "github.com/containernetworking/cni/cnitool")
	tool.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := tool.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building cnitool: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// removeDeadBinDirs removes the binary directories of earlier runs whose
// test process is gone: a run killed by its timeout exits without
// removing its own (about 200 MB each).
func removeDeadBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "skiff-e2e-bin-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.Split(filepath.Base(d), "-")[3])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// proc is a running binary whose output goes to a file shown on failure.
type proc struct {
	cmd  *exec.Cmd
	log  string
	addr string
}

// startController starts skiff-controller with args and waits until its
// gRPC health service answers SERVING.
func startController(t *testing.T, addr string, args ...string) *proc {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "controller.log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "skiff-controller"), append([]string{"--listen", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logf, addr: addr}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("controller %s log:\n%s", addr, tail(string(b), 40))
		}
	})
	conn := dial(t, addr)
	hc := healthpb.NewHealthClient(conn)
	testkit.Eventually(t, "controller on "+addr+" ready", 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return true, ""
		}
		b, _ := os.ReadFile(logf)
		return false, fmt.Sprintf("%v %v\n%s", r.GetStatus(), err, b)
	})
	return p
}

func (p *proc) kill() {
	if p.cmd.Process != nil && p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func mgmt(t *testing.T, addr string) skiffv1.ManagementServiceClient {
	return skiffv1.NewManagementServiceClient(dial(t, addr))
}

func agentClient(t *testing.T, addr string) skiffv1.AgentServiceClient {
	return skiffv1.NewAgentServiceClient(dial(t, addr))
}

// skiffctl runs the real CLI and returns stdout, stderr and the error.
func skiffctl(addr string, args ...string) (string, string, error) {
	cmd := exec.Command(filepath.Join(binDir, "skiffctl"), append([]string{"--controller", addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}
