// Package proto_test checks that the committed generated code is what
// `make generate` produces from the .proto files.
package proto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatal("protoc is not installed: run `make deps` (Debian protobuf-compiler)")
	}
	out := t.TempDir()
	cmd := exec.Command("../hack/generate.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate: %v\n%s", err, b)
	}
	gen, err := filepath.Glob(filepath.Join(out, "proto", "skiff", "v1", "*.go"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("generate produced no Go files (%v)", err)
	}
	committed, _ := filepath.Glob("skiff/v1/*.pb.go")
	if len(committed) != len(gen) {
		t.Errorf("generate makes %d files, %d are committed", len(gen), len(committed))
	}
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		have, err := os.ReadFile(filepath.Join("skiff", "v1", filepath.Base(g)))
		if err != nil {
			t.Errorf("%s is not committed: run make generate", filepath.Base(g))
			continue
		}
		if !bytes.Equal(want, have) {
			t.Errorf("proto/skiff/v1/%s is stale: run make generate", filepath.Base(g))
		}
	}
}
