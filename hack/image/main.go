// Command image writes the project's container images as docker-archive
// tarballs, without a registry (internal/images):
//
//	go run ./hack/image skiff   --bin-dir bin --out bin/skiff-image.tar [--tag skiff.local/skiff:dev --tag skiff.local/skiff:v1]
//	go run ./hack/image pause   --bin-dir DIR --out DIR/pause.tar    (DIR/pause: go build ./test/k8s/images/pause)
//	go run ./hack/image testpod --bin-dir DIR --out DIR/testpod.tar  (Debian's busybox-static and DIR/probe: ./test/k8s/images/probe)
//
// Import into containerd with `ctr -n k8s.io images import FILE`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/skiff-sdn/skiff/internal/images"
)

type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: image skiff|pause|testpod --out FILE [--bin-dir DIR] [--tag TAG]...")
		os.Exit(2)
	}
	kind := os.Args[1]
	fs := flag.NewFlagSet("image "+kind, flag.ExitOnError)
	binDir := fs.String("bin-dir", "bin", "where the built binaries are")
	out := fs.String("out", "", "the tarball to write")
	var tag tags
	fs.Var(&tag, "tag", "a tag of the image (repeatable; default: the kind's own)")
	_ = fs.Parse(os.Args[2:])
	if *out == "" {
		fmt.Fprintln(os.Stderr, "image: --out is required")
		os.Exit(2)
	}
	if err := images.Write(kind, *binDir, *out, tag...); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: wrote %s (%s)\n", *out, kind)
}
