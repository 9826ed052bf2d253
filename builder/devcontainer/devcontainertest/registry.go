// Package devcontainertest serves devcontainer features from an OCI
// registry on loopback, as a test needs them: no registry outside is
// reachable from the machines envd is tested on.
package devcontainertest

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry starts an in-memory OCI registry on 127.0.0.1 (a dynamic port)
// for the test and answers its host:port.
func Registry(t testing.TB) string {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Tar makes a tar of files (name: content; names ending in .sh are
// executable).
func Tar(t testing.TB, files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// PushFeature pushes a feature artifact (one layer, the tar layer; the
// devcontainers config media type) as ref ("host:port/repo:tag").
func PushFeature(t testing.TB, ref string, layer []byte) {
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.devcontainers")
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(layer, "application/vnd.devcontainers.layer.v1+tar"),
		MediaType: "application/vnd.devcontainers.layer.v1+tar"})
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}
