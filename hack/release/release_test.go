package main

import (
	"archive/tar"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeSpec is an image of two platforms whose "binaries" are small files.
func fakeSpec(t *testing.T, epoch int64) imageSpec {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, p := range []string{"linux/arm64", "linux/amd64"} {
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "_"))
		if err := os.WriteFile(path, []byte("binary for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = path
	}
	return imageSpec{name: "adapter-controller", version: "v0.1.0", revision: "abc", created: time.Unix(epoch, 0).UTC(), binaries: bins}
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBuildIndexIsReproducible(t *testing.T) {
	build := func(epoch int64) v1.ImageIndex {
		idx, err := buildIndex(fakeSpec(t, epoch))
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	first, second := build(1796592549), build(1796592549)
	if digest(t, first) != digest(t, second) {
		t.Errorf("two builds of the same inputs: %s and %s", digest(t, first), digest(t, second))
	}
	// Written to a layout and read back, the index keeps its digest.
	dir := filepath.Join(t.TempDir(), "layout")
	if err := writeLayout(dir, first, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	back, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, back) != digest(t, first) {
		t.Errorf("layout holds %s, built %s", digest(t, back), digest(t, first))
	}
	if other := build(1796592550); digest(t, other) == digest(t, first) {
		t.Errorf("another commit time gave the same digest %s: timestamps are not taken from -epoch", digest(t, other))
	}
}

func TestImageContents(t *testing.T) {
	spec := fakeSpec(t, 1796592549)
	idx, err := buildIndex(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
		if d.ArtifactType != "" || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("index entry %s: media type %q, artifactType %q: want an OCI image manifest, no artifact type", d.Platform, d.MediaType, d.ArtifactType)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	if m.Annotations["org.opencontainers.image.version"] != "v0.1.0" || m.Annotations["org.opencontainers.image.revision"] != "abc" {
		t.Errorf("index annotations %v lack the version and revision", m.Annotations)
	}
	img, err := idx.Image(m.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Architecture != "arm64" || !cf.Created.Equal(spec.created) ||
		cmp.Diff([]string{"/manager"}, cf.Config.Entrypoint) != "" || cf.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("config: user %q arch %q created %v entrypoint %v labels %v", cf.Config.User, cf.Architecture, cf.Created, cf.Config.Entrypoint, cf.Config.Labels)
	}
	files := layerFiles(t, img)
	if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") || !strings.Contains(files["etc/group"], "nonroot:x:65532:") {
		t.Errorf("no nonroot user 65532: passwd %q group %q", files["etc/passwd"], files["etc/group"])
	}
	if files["manager"] != "binary for linux/arm64" {
		t.Errorf("/manager of linux/arm64 is %q", files["manager"])
	}
}

// layerFiles reads every regular file of an image's layers (later layers win).
func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(time.Unix(1796592549, 0)) {
				t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
			}
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
		rc.Close() //nolint:errcheck // read-only
	}
	return files
}

func TestPushAndVerify(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := filepath.Join(t.TempDir(), "layout")
	idx, err := buildIndex(fakeSpec(t, 1796592549))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(dir, idx, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	ref := host + "/loraplane/adapter-controller:v0.1.0"
	if err := verifyCmd([]string{"-layout", dir, "-ref", ref}); err == nil {
		t.Fatal("verify passed before anything was pushed")
	}
	if err := pushCmd([]string{"-layout", dir, "-ref", ref}); err != nil {
		t.Fatal(err)
	}
	if err := verifyCmd([]string{"-layout", dir, "-ref", ref}); err != nil {
		t.Fatalf("verify after push: %v", err)
	}
	// Another index under the tag: verify names both digests.
	other, err := buildIndex(fakeSpec(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	tag, err := parseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, other); err != nil {
		t.Fatal(err)
	}
	err = verifyCmd([]string{"-layout", dir, "-ref", ref})
	if err == nil || !strings.Contains(err.Error(), digest(t, idx).String()) || !strings.Contains(err.Error(), digest(t, other).String()) {
		t.Errorf("verify of a retagged index: %v, want both digests named", err)
	}
}

func TestSetScalar(t *testing.T) {
	src := "# top\nimage:\n  registry: ghcr.io/loraplane # where\n  tag: \"\"\nrouter:\n  image:\n    digest: \"\"\n  list: [a]\n"
	tests := map[string]struct {
		path, value string
		want        string
		wantErr     string
	}{
		"nested, comment kept": {path: "image.registry", value: "127.0.0.1:5000/x",
			want: "# top\nimage:\n  registry: \"127.0.0.1:5000/x\" # where\n  tag: \"\"\nrouter:\n  image:\n    digest: \"\"\n  list: [a]\n"},
		"empty string replaced": {path: "router.image.digest", value: "sha256:ab",
			want: "# top\nimage:\n  registry: ghcr.io/loraplane # where\n  tag: \"\"\nrouter:\n  image:\n    digest: \"sha256:ab\"\n  list: [a]\n"},
		"missing key":    {path: "router.image.tag", value: "x", wantErr: `no key "tag"`},
		"not a scalar":   {path: "router.list", value: "x", wantErr: "not a one-line scalar"},
		"under a scalar": {path: "image.tag.x", value: "x", wantErr: "not under a mapping"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := setScalar([]byte(src), tc.path, tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
