// Package ociimage writes container images without a registry: one layer
// made from files given by the caller, written as a docker-archive tarball
// (manifest.json with RepoTags, the config, the layer) that `ctr images
// import` and `docker load` read. Built on go-containerregistry.
//
//	err := ociimage.Write("bin/skiff-image.tar", []string{"skiff.local/skiff:dev"}, ociimage.Image{
//		Files:      []ociimage.File{{Path: "usr/local/bin/skiff-agent", Mode: 0o755, Data: agent}},
//		Entrypoint: []string{"/usr/local/bin/skiff-agent"},
//	})
//
// The same files give the same layer and config (fixed times, owners and
// order), so an image's digest names its content; with one tag, the same
// archive bytes too. The archive is written aside and renamed into place.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of the image's layer: a directory when Dir is set, a
// symbolic link to Link when that is set, else a file holding Data.
// Mode is the permission bits (0o644 for a file, 0o755 for a directory
// when zero). Parent directories are made (0o755) when not listed.
type File struct {
	Path string
	Mode int64
	Data []byte
	Link string
	Dir  bool
}

// Image is what goes in: the layer's files and the config's process.
type Image struct {
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
}

// epoch is every entry's time: images of the same files are the same.
var epoch = time.Unix(0, 0).UTC()

// Layer returns the tar stream of the image's layer.
func Layer(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := make([]File, len(files))
	for i, f := range files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || p == "/" || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("ociimage: file path %q: must name a file inside the image", f.Path)
		}
		f.Path = p
		sorted[i] = f
	}
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Path == sorted[i-1].Path {
			return nil, fmt.Errorf("ociimage: file path %q: listed twice", sorted[i].Path)
		}
	}
	for _, f := range sorted {
		p := f.Path
		// Parents first.
		var parents []string
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: p, Mode: f.Mode, ModTime: epoch, Format: tar.FormatPAX}
		if f.Dir {
			if dirs[p] {
				continue
			}
			dirs[p] = true
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
			if err := tw.WriteHeader(h); err != nil {
				return nil, fmt.Errorf("ociimage: %s: %w", p, err)
			}
			continue
		}
		if f.Link != "" {
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: %s: %w", p, err)
		}
		if f.Link == "" {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Build returns the image (linux/amd64, one layer).
func Build(img Image) (v1.Image, error) {
	layerTar, err := Layer(img.Files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	out, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", "amd64", v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env, cf.Config.Labels = img.Entrypoint, img.Cmd, img.Env, img.Labels
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	}
	return mutate.ConfigFile(out, cf)
}

// Write builds the image and writes it, tagged with every tag given, as
// a docker-archive tarball at file (manifest.json lists the tags in the
// order given).
func Write(file string, tags []string, img Image) error {
	if len(tags) == 0 {
		return fmt.Errorf("ociimage: %s: no tag", file)
	}
	i, err := Build(img)
	if err != nil {
		return err
	}
	refs := map[name.Tag]v1.Image{}
	for _, tag := range tags {
		t, err := name.NewTag(tag, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("ociimage: tag %q: %w", tag, err)
		}
		refs[t] = i
	}
	// Written aside and renamed: file is whole or not there.
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	tmp := f.Name()
	f.Close()
	if err := tarball.MultiWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ociimage: writing %s: %w", file, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ociimage: %w", err)
	}
	return nil
}
