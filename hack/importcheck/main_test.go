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
	write(t, root, "offload/flower/f.go", "package flower\nimport _ \"github.com/skiff-sdn/skiff/datapath\"\n")
	write(t, root, "offload/vf/v.go", "package vf\nimport _ \"github.com/skiff-sdn/skiff/datapathx\"\n")
	write(t, root, "datapath/software/s.go", "package software\nimport _ \"github.com/skiff-sdn/skiff/agent/localapi\"\n")
	write(t, root, "controller/c.go", "package controller\nimport _ \"github.com/skiff-sdn/skiff/agent\"\n")
	write(t, root, "agent/a.go", "package agent\nimport _ \"github.com/skiff-sdn/skiff/controller/store\"\n")

	bad, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"agent/a.go:2: imports github.com/skiff-sdn/skiff/controller/store (the agent's side imports the controller)",
		"agent/agent.go:5: imports github.com/vishvananda/netlink (kernel libraries outside internal/nl: go through internal/nl)",
		"controller/c.go:2: imports github.com/skiff-sdn/skiff/agent (the controller imports the agent's side)",
		"datapath/software/s.go:2: imports github.com/skiff-sdn/skiff/agent/localapi (a datapath imports the agent)",
		"internal/nlx/x.go:2: imports github.com/vishvananda/netns (kernel libraries outside internal/nl: go through internal/nl)",
		"offload/flower/f.go:2: imports github.com/skiff-sdn/skiff/datapath (a NIC library imports a datapath)",
		"offload/x_test.go:2: imports github.com/google/nftables/expr (kernel libraries outside internal/nl: go through internal/nl)",
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
