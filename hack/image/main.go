// Command image writes the project's container images as docker-archive
// tarballs, without a registry (internal/images):
//
//	go run ./hack/image skiff   --bin-dir bin --out bin/skiff-image.tar   [--tag skiff.local/skiff:dev]
//	go run ./hack/image pause   --bin-dir bin --out bin/pause-image.tar   (bin/pause: test/k8s/images/pause)
//	go run ./hack/image testpod --out bin/testpod-image.tar               (Debian's busybox-static)
//
// Import into containerd with `ctr -n k8s.io images import FILE`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/skiff-sdn/skiff/internal/images"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image skiff|pause|testpod [flags]")
		os.Exit(2)
	}
	kind := os.Args[1]
	fs := flag.NewFlagSet("image "+kind, flag.ExitOnError)
	binDir := fs.String("bin-dir", "bin", "where the built binaries are")
	out := fs.String("out", "", "the tarball to write")
	tag := fs.String("tag", "", "the image's tag (default: the kind's)")
	_ = fs.Parse(os.Args[2:])
	if *out == "" {
		fmt.Fprintln(os.Stderr, "image: --out is required")
		os.Exit(2)
	}
	if err := images.Write(kind, *binDir, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
