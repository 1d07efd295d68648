// Command importcheck enforces Skiff's import rules, tests included:
//
//   - only internal/nl and the packages under it import the netlink, tc
//     and nftables libraries: everything else reaches the kernel through
//     internal/nl, where it can be faked;
//   - the NIC libraries under offload/ import no datapath: the datapaths
//     use them, never the other way;
//   - the controller and the agent never import each other (they meet in
//     proto and internal/plan), and no datapath imports either.
//
// make lint runs it; it prints every import that breaks a rule, with its
// file and line, and exits 1.
//
//	go run ./hack/importcheck [DIR]
package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const module = "github.com/skiff-sdn/skiff/"

// rule forbids the files under In (directories relative to the module
// root; none: every file) but those under Except to import any of Imports
// (a path or a path prefix).
type rule struct {
	In, Except []string
	Imports    []string
	Why        string
}

var rules = []rule{
	{
		Except: []string{"internal/nl"},
		Imports: []string{
			"github.com/vishvananda/netlink",
			"github.com/vishvananda/netns",
			"github.com/mdlayher/netlink",
			"github.com/florianl/go-tc",
			"github.com/google/nftables",
		},
		Why: "kernel libraries outside internal/nl: go through internal/nl",
	},
	{In: []string{"offload"}, Imports: []string{module + "datapath"}, Why: "a NIC library imports a datapath"},
	{In: []string{"controller"}, Imports: []string{module + "agent", module + "datapath"}, Why: "the controller imports the agent's side"},
	{In: []string{"agent", "datapath"}, Imports: []string{module + "controller"}, Why: "the agent's side imports the controller"},
	{In: []string{"datapath"}, Imports: []string{module + "agent"}, Why: "a datapath imports the agent"},
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	bad, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "importcheck:", err)
		os.Exit(2)
	}
	for _, b := range bad {
		fmt.Println(b)
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "importcheck: %d import(s) break Skiff's import rules\n", len(bad))
		os.Exit(1)
	}
}

// under reports whether rel is dir or lies below it.
func under(rel string, dirs []string) bool {
	for _, d := range dirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// matches reports whether import path p is one of prefixes or below one.
func matches(p string, prefixes []string) bool {
	for _, m := range prefixes {
		if p == m || strings.HasPrefix(p, m+"/") {
			return true
		}
	}
	return false
}

// check walks the Go files under root (vendor, testdata and hidden
// directories skipped) and returns "file:line: imports X (why)" for each
// forbidden import.
func check(root string) ([]string, error) {
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "vendor" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		var apply []rule
		for _, r := range rules {
			if (len(r.In) == 0 || under(rel, r.In)) && !under(rel, r.Except) {
				apply = append(apply, r)
			}
		}
		if len(apply) == 0 {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			for _, r := range apply {
				if matches(p, r.Imports) {
					bad = append(bad, fmt.Sprintf("%s:%d: imports %s (%s)", rel, fset.Position(imp.Pos()).Line, p, r.Why))
				}
			}
		}
		return nil
	})
	return bad, err
}
