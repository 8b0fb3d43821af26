package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user and group the images run as (distroless's nonroot, the chart's
// runAsUser and the Dockerfile's USER).
const nonroot = 65532

// imageSpec is what one release image is made of.
type imageSpec struct {
	name     string            // binary name: adapter-controller, router-controller
	version  string            // vX.Y.Z
	revision string            // git commit
	created  time.Time         // the commit's time (SOURCE_DATE_EPOCH)
	binaries map[string]string // "linux/amd64" -> path of the static binary
}

func imageCmd(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var spec imageSpec
	var bins listFlag
	epoch := fs.Int64("epoch", -1, "seconds since 1970 of every timestamp (SOURCE_DATE_EPOCH)")
	out := fs.String("out", "", "directory of the OCI image layout to write (must not exist)")
	fs.StringVar(&spec.name, "name", "", "binary name")
	fs.StringVar(&spec.version, "version", "", "release version")
	fs.StringVar(&spec.revision, "revision", "", "git commit")
	fs.Var(&bins, "binary", "OS/ARCH=PATH of a static binary, once per platform")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := required(fs, "name", "version", "revision", "out"); err != nil {
		return err
	}
	if *epoch < 0 {
		return errors.New("-epoch is required (the commit's time in seconds)")
	}
	if len(bins) == 0 {
		return errors.New("at least one -binary OS/ARCH=PATH is required")
	}
	spec.created = time.Unix(*epoch, 0).UTC()
	spec.binaries = map[string]string{}
	for _, b := range bins {
		platform, path, ok := strings.Cut(b, "=")
		if !ok || strings.Count(platform, "/") != 1 {
			return fmt.Errorf("-binary %q: want OS/ARCH=PATH", b)
		}
		spec.binaries[platform] = path
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s exists: remove it first (a layout is written whole)", *out)
	}
	idx, err := buildIndex(spec)
	if err != nil {
		return err
	}
	if err := writeLayout(*out, idx, spec.version); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}

// labels are the OCI annotations of the index and the labels of every image's config.
func (s imageSpec) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "loraplane " + s.name,
		"org.opencontainers.image.source":   "https://github.com/loraplane/loraplane",
		"org.opencontainers.image.version":  s.version,
		"org.opencontainers.image.revision": s.revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  s.created.Format(time.RFC3339),
	}
}

// buildIndex assembles the multi-platform index, platforms in name order.
func buildIndex(s imageSpec) (v1.ImageIndex, error) {
	base, err := layerOf(baseFiles(), s.created)
	if err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(s.binaries))
	for p := range s.binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := platformImage(s, base, p)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.name, p, err)
		}
		desc, err := imageDescriptor(img)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: described{img, desc}})
	}
	annotated, ok := mutate.Annotations(idx, s.labels()).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("annotating the index gave no index")
	}
	return annotated, nil
}

// described is an image whose index entry is desc exactly: go-containerregistry would give an
// image's entry an artifactType (its config's media type), which marks an artifact, not an image.
type described struct {
	v1.Image
	desc v1.Descriptor
}

// Descriptor is what partial.Descriptor (and so mutate.AppendManifests) asks for.
func (d described) Descriptor() (*v1.Descriptor, error) { return &d.desc, nil } //nolint:unparam // the interface's signature

// imageDescriptor is the index entry of an image: media type, digest, size and platform.
func imageDescriptor(img v1.Image) (v1.Descriptor, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size, Platform: cf.Platform()}, nil
}

// platformImage is one platform's image: the shared base layer, then the binary as /manager.
func platformImage(s imageSpec, base v1.Layer, platform string) (v1.Image, error) {
	goos, arch, _ := strings.Cut(platform, "/")
	binary, err := os.ReadFile(s.binaries[platform])
	if err != nil {
		return nil, err
	}
	manager, err := layerOf([]file{{name: "manager", mode: 0o755, body: binary}}, s.created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: s.created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "loraplane release: /etc/passwd, /etc/group (nonroot 65532), /tmp, /home/nonroot"}},
		mutate.Addendum{Layer: manager, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: fmt.Sprintf("loraplane release: /manager (%s %s, CGO_ENABLED=0 GOOS=%s GOARCH=%s)", s.name, s.version, goos, arch)}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = goos, arch, created
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/manager"},
		WorkingDir: "/", // not the home: a cluster that runs it under another UID can enter /
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     s.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of a layer: a directory when body is nil and dir is set.
type file struct {
	name     string
	mode     int64
	dir      bool
	uid, gid int
	body     []byte
}

// baseFiles is the scratch root the binaries need: the users (the process runs as 65532 and
// has a home), /tmp. No CA certificates: the controllers reach the API server with the service
// account's CA and the engines over plain HTTP on pod IPs, and serve their metrics with their
// own certificate; nothing they do verifies a public TLS server. No time zones: they log UTC.
func baseFiles() []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, body: []byte("hosts: files dns\n")},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, dir: true, uid: nonroot, gid: nonroot},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// layerOf writes files into a gzipped tar whose every header is fixed (mtime, owners, format)
// and whose gzip header carries no name or time, so equal files give an equal digest.
func layerOf(files []file, mtime time.Time) (v1.Layer, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		h := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime,
			Typeflag: tar.TypeReg, Size: int64(len(f.body)), Format: tar.FormatPAX,
		}
		if f.dir {
			h.Name, h.Typeflag, h.Size = f.name+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(zw, &raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeLayout writes dir as an OCI image layout whose index.json names the release index
// (annotated with its version as the ref name, as `crane`, skopeo and buildkit read it).
func writeLayout(dir string, idx v1.ImageIndex, version string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
	}))
}

// readLayout is the release index of a layout writeLayout wrote.
func readLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s: index.json names %d manifests, want the one release index", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
