// Command importcheck enforces Skiff's kernel seam: only internal/nl and
// the packages under it may import the netlink, tc and nftables libraries
// (tests included). Everything else reaches the kernel through
// internal/nl, where it can be faked. make lint runs it; it prints every
// import that breaks the rule, with its file and line, and exits 1.
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

// kernelModules may be imported only under internal/nl.
var kernelModules = []string{
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
	"github.com/mdlayher/netlink",
	"github.com/florianl/go-tc",
	"github.com/google/nftables",
}

// allowed is the seam, relative to the module root.
const allowed = "internal/nl"

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
		fmt.Fprintf(os.Stderr, "importcheck: %d import(s) of kernel libraries outside %s/: go through internal/nl\n", len(bad), allowed)
		os.Exit(1)
	}
}

// check walks the Go files under root (vendor, testdata and hidden
// directories skipped) and returns "file:line: imports X" for each
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
		if rel == allowed || strings.HasPrefix(rel, allowed+"/") {
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
			for _, m := range kernelModules {
				if p == m || strings.HasPrefix(p, m+"/") {
					bad = append(bad, fmt.Sprintf("%s:%d: imports %s", rel, fset.Position(imp.Pos()).Line, p))
				}
			}
		}
		return nil
	})
	return bad, err
}
