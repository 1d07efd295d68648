package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, rel, src string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	write(t, root, "internal/nl/nl.go", "package nl\nimport _ \"github.com/vishvananda/netlink\"\n")
	write(t, root, "internal/nl/tc/tc.go", "package tc\nimport _ \"github.com/mdlayher/netlink/nlenc\"\n")
	write(t, root, "agent/agent.go", "package agent\n\nimport (\n\t\"fmt\"\n\tnl \"github.com/vishvananda/netlink\"\n)\n")
	write(t, root, "offload/x_test.go", "package offload\nimport _ \"github.com/google/nftables/expr\"\n")
	write(t, root, "internal/nlx/x.go", "package nlx\nimport _ \"github.com/vishvananda/netns\"\n")
	write(t, root, "cmd/ok/main.go", "package main\nimport _ \"github.com/vishvananda/netlinkish\"\n")
	write(t, root, "testdata/x.go", "package x\nimport _ \"github.com/vishvananda/netlink\"\n")

	bad, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"agent/agent.go:5: imports github.com/vishvananda/netlink",
		"internal/nlx/x.go:2: imports github.com/vishvananda/netns",
		"offload/x_test.go:2: imports github.com/google/nftables/expr",
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("check found\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

// TestTree holds the repository itself to the rule, so go test fails on a
// forbidden import as make lint does.
func TestTree(t *testing.T) {
	bad, err := check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}
