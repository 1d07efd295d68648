package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteAndRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "img.tar")
	in := Image{
		Files: []File{
			{Path: "usr/local/bin/tool", Mode: 0o755, Data: []byte("#!/bin/sh\necho hi\n")},
			{Path: "/etc/conf", Data: []byte("x=1\n")},
			{Path: "bin/sh", Link: "/usr/local/bin/tool"},
			{Path: "tmp", Dir: true, Mode: 0o1777},
		},
		Entrypoint: []string{"/usr/local/bin/tool"},
		Labels:     map[string]string{"a": "b"},
	}
	if err := Write(file, []string{"skiff.local/test:v1"}, in); err != nil {
		t.Fatal(err)
	}
	// Read back as a runtime would: the manifest's tag, the config, and
	// the layer whose uncompressed sha256 is the config's diff_id.
	tag, _ := name.NewTag("skiff.local/test:v1")
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/tool" || cf.Config.Labels["a"] != "b" {
		t.Errorf("config %+v", cf)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	sum := sha256.Sum256(raw)
	if got := "sha256:" + hex.EncodeToString(sum[:]); len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0].String() != got {
		t.Errorf("diff_ids %v, layer is %s", cf.RootFS.DiffIDs, got)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Name == "usr/local/bin/tool" && h.Mode != 0o755 {
			t.Errorf("tool mode %o", h.Mode)
		}
		if h.Name == "bin/sh" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/local/bin/tool") {
			t.Errorf("bin/sh %+v", h)
		}
		if h.Name == "tmp/" && (h.Typeflag != tar.TypeDir || h.Mode != 0o1777) {
			t.Errorf("tmp/ %+v", h)
		}
	}
	want := "bin/ bin/sh etc/ etc/conf tmp/ usr/ usr/local/ usr/local/bin/ usr/local/bin/tool"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("layer holds %q, want %q", got, want)
	}
	// docker-archive: manifest.json names the tag.
	f, _ := os.Open(file)
	defer f.Close()
	tr = tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatal("no manifest.json")
		}
		if h.Name == "manifest.json" {
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m) != 1 || m[0].RepoTags[0] != "skiff.local/test:v1" {
				t.Errorf("manifest.json %+v %v", m, err)
			}
			break
		}
	}
	// Same input, same bytes.
	file2 := filepath.Join(t.TempDir(), "img.tar")
	if err := Write(file2, []string{"skiff.local/test:v1"}, in); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(file)
	b, _ := os.ReadFile(file2)
	if !bytes.Equal(a, b) {
		t.Error("two writes of the same image differ")
	}
}

// TestTags: one image under several tags; every tag names the same
// image (same config digest), whatever order the archive lists them in.
func TestTags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "img.tar")
	in := Image{Files: []File{{Path: "x", Data: []byte("x")}}}
	tags := []string{"skiff.local/skiff:dev", "skiff.local/skiff:v1.2.3-4-gabcdef-dirty"}
	if err := Write(file, tags, in); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 2 {
		t.Fatalf("manifest %+v, want one image with two tags", m)
	}
	var digests []string
	for _, tg := range tags {
		tag, _ := name.NewTag(tg)
		img, err := tarball.ImageFromPath(file, &tag)
		if err != nil {
			t.Fatalf("%s: %v", tg, err)
		}
		d, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("the tags name different images: %v", digests)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tags := range [][]string{{"Not A Tag!"}, {"skiff.local/ok:v1", "no:tag:twice"}, nil} {
		if err := Write(filepath.Join(dir, "x.tar"), tags, Image{}); err == nil || !strings.Contains(err.Error(), "tag") {
			t.Errorf("tags %q: %v", tags, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.tar")); err == nil {
		t.Error("a refused image left a file behind")
	}
	for _, p := range []string{"../etc/passwd", "/", "."} {
		if _, err := Layer([]File{{Path: p}}); err == nil || !strings.Contains(err.Error(), "file path") {
			t.Errorf("path %q: %v", p, err)
		}
	}
	if _, err := Layer([]File{{Path: "a"}, {Path: "/a"}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a path listed twice: %v", err)
	}
}
