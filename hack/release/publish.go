package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refFlags are the flags of push and verify: a layout and where it goes.
func refFlags(cmd string, args []string) (v1.ImageIndex, name.Reference, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("layout", "", "OCI image layout written by release image")
	ref := fs.String("ref", "", "REGISTRY/REPOSITORY:TAG")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if err := required(fs, "layout", "ref"); err != nil {
		return nil, nil, err
	}
	idx, err := readLayout(*dir)
	if err != nil {
		return nil, nil, err
	}
	r, err := parseRef(*ref)
	return idx, r, err
}

// parseRef parses a tag reference; a registry on a loopback address is spoken to over plain
// HTTP (a test registry has no certificate), every other over HTTPS.
func parseRef(s string) (name.Reference, error) {
	r, err := name.NewTag(s, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%q: want REGISTRY/REPOSITORY:TAG: %w", s, err)
	}
	host, _, err := net.SplitHostPort(r.RegistryStr())
	if err != nil {
		host = r.RegistryStr()
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		return name.NewTag(s, name.StrictValidation, name.Insecure)
	}
	return r, nil
}

// remoteOptions authenticate as docker and helm do (~/.docker/config.json, credential helpers).
func remoteOptions() []remote.Option {
	return []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

func pushCmd(args []string) error {
	idx, ref, err := refFlags("push", args)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, remoteOptions()...); err != nil {
		return fmt.Errorf("pushing to %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref, d)
	return nil
}

// verifyCmd pulls the index back from the registry: its digest, every platform manifest's
// digest and every layer's bytes (hashed) must be the layout's.
func verifyCmd(args []string) error {
	idx, ref, err := refFlags("verify", args)
	if err != nil {
		return err
	}
	want, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	wantDigest, err := idx.Digest()
	if err != nil {
		return err
	}
	got, err := remote.Index(ref, remoteOptions()...)
	if err != nil {
		return fmt.Errorf("pulling %s: %w", ref, err)
	}
	gotDigest, err := got.Digest()
	if err != nil {
		return err
	}
	if gotDigest != wantDigest {
		return fmt.Errorf("%s is %s, the layout's index is %s", ref, gotDigest, wantDigest)
	}
	layers := 0
	for _, m := range want.Manifests {
		n, err := verifyImage(ref, m)
		if err != nil {
			return err
		}
		layers += n
	}
	fmt.Printf("%s@%s: index, %d manifests and %d layers pulled back and equal to the layout\n", ref, gotDigest, len(want.Manifests), layers)
	return nil
}

// verifyImage pulls one platform's manifest by digest and hashes each of its layers.
func verifyImage(ref name.Reference, m v1.Descriptor) (int, error) {
	img, err := remote.Image(ref.Context().Digest(m.Digest.String()), remoteOptions()...)
	if err != nil {
		return 0, fmt.Errorf("pulling %s@%s (%s): %w", ref.Context(), m.Digest, m.Platform, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		want, err := l.Digest()
		if err != nil {
			return 0, err
		}
		if err := hashBlob(l, want); err != nil {
			return 0, fmt.Errorf("%s@%s (%s): %w", ref.Context(), m.Digest, m.Platform, err)
		}
	}
	return len(layers), nil
}

// hashBlob reads a layer's compressed bytes and compares their sha256 with its digest.
func hashBlob(l v1.Layer, want v1.Hash) error {
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close() //nolint:errcheck // read-only
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return fmt.Errorf("layer %s: %w", want, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want.String() {
		return errors.New("layer " + want.String() + " pulled back as " + got)
	}
	return nil
}
