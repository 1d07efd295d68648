// Package images builds the project's container images without a
// registry (internal/ociimage): Skiff's own (the four binaries), and the
// pause and test pod images of the test cluster (test/k8s).
//
//	err := images.Write("skiff", "bin", "bin/skiff-image.tar")                 // skiff.local/skiff:dev
//	err := images.Write("skiff", "bin", "bin/skiff-image.tar", images.SkiffTag, "skiff.local/skiff:v0.4.0")
package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/skiff-sdn/skiff/internal/ociimage"
)

// Tags of the images (the pause image's is containerd 1.6's default
// sandbox_image, so that no configuration must name it).
const (
	SkiffTag   = "skiff.local/skiff:dev"
	PauseTag   = "registry.k8s.io/pause:3.6"
	TestpodTag = "skiff.local/testpod:dev"
)

// SkiffBinaries are the commands the skiff image holds (make build puts
// them in bin/), under /usr/local/bin.
var SkiffBinaries = []string{"skiff-controller", "skiff-agent", "skiffctl", "skiff-cni", "skiff-deviceplugin"}

// Write writes the image kind (skiff, pause, testpod) to out, tagged
// with tags (the kind's own tag when none, or only empty ones, are
// given), from the binaries in binDir: SkiffBinaries (make build) for
// skiff, pause
// (test/k8s/images/pause) for pause, probe (test/k8s/images/probe) for
// testpod.
func Write(kind, binDir, out string, tags ...string) error {
	var img ociimage.Image
	var def string
	switch kind {
	case "skiff":
		def = SkiffTag
		for _, b := range SkiffBinaries {
			data, err := os.ReadFile(filepath.Join(binDir, b))
			if err != nil {
				return fmt.Errorf("%w (make build first)", err)
			}
			img.Files = append(img.Files, ociimage.File{Path: "usr/local/bin/" + b, Mode: 0o755, Data: data})
		}
		// The agent and the CNI install step write under these.
		img.Files = append(img.Files, ociimage.File{Path: "etc/skiff", Dir: true}, ociimage.File{Path: "tmp", Dir: true, Mode: 0o1777})
		img.Entrypoint = []string{"/usr/local/bin/skiff-agent"}
	case "pause":
		def = PauseTag
		data, err := os.ReadFile(filepath.Join(binDir, "pause"))
		if err != nil {
			return fmt.Errorf("%w (go build -o %s/ ./test/k8s/images/pause)", err, binDir)
		}
		img.Files = []ociimage.File{{Path: "pause", Mode: 0o755, Data: data}}
		img.Entrypoint = []string{"/pause"}
	case "testpod":
		def = TestpodTag
		files, err := busybox()
		if err != nil {
			return err
		}
		probe, err := os.ReadFile(filepath.Join(binDir, "probe"))
		if err != nil {
			return fmt.Errorf("%w (go build -o %s/ ./test/k8s/images/probe)", err, binDir)
		}
		img.Files = append(files, ociimage.File{Path: "usr/local/bin/probe", Mode: 0o755, Data: probe})
		img.Entrypoint = []string{"/bin/sh"}
	default:
		return fmt.Errorf("images: unknown image %q: skiff, pause or testpod", kind)
	}
	var use []string
	for _, t := range tags {
		if t != "" {
			use = append(use, t)
		}
	}
	if len(use) == 0 {
		use = []string{def}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return ociimage.Write(out, use, img)
}

// busybox is Debian's static busybox with a link per applet, and the files
// ping and friends want.
func busybox() ([]ociimage.File, error) {
	const bb = "/bin/busybox"
	data, err := os.ReadFile(bb)
	if err != nil {
		return nil, fmt.Errorf("%w (install busybox-static)", err)
	}
	list, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	files := []ociimage.File{
		{Path: "bin/busybox", Mode: 0o755, Data: data},
		{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		{Path: "etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "tmp", Dir: true, Mode: 0o1777},
	}
	for _, a := range strings.Fields(string(list)) {
		if a == "bin/busybox" {
			continue
		}
		files = append(files, ociimage.File{Path: a, Link: "/bin/busybox"})
	}
	return files, nil
}
