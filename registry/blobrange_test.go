package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pushBlob uploads data as a layer blob of repo and returns its digest.
func pushBlob(t testing.TB, srv *Server, repo string, data []byte) string {
	t.Helper()
	ref, err := name.NewRepository(srv.Addr()+"/"+repo, name.Insecure)
	require.NoError(t, err)
	l := static.NewLayer(data, types.OCILayer)
	a := srv.Access().Node
	require.NoError(t, remote.WriteLayer(ref, l, remote.WithAuth(&authn.Basic{Username: a.User, Password: a.Password})))
	d, err := l.Digest()
	require.NoError(t, err)
	return d.String()
}

// noRedirects answers a redirect instead of following it (distribution
// redirects a path that is not clean to the clean one).
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// getBlobRange GETs repo's blob dgst from srv with the node's credential and the
// given Range header ("" = none).
func getBlobRange(t testing.TB, srv *Server, repo, dgst, rng string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/v2/"+repo+"/blobs/"+dgst, nil)
	require.NoError(t, err)
	a := srv.Access().Node
	req.SetBasicAuth(a.User, a.Password)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, body
}

func startRegistryWith(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0", append([]Option{WithLogWriter(io.Discard)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// Ranged blob GETs answered from the blob's file say and send what
// distribution does.
func TestBlobRanges(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	ours := startRegistryWith(t)
	theirs := startRegistryWith(t, withDistributionRanges())
	const repo = "envd/admin/proj"
	dgst := pushBlob(t, ours, repo, data)
	require.Equal(t, dgst, pushBlob(t, theirs, repo, data))

	t.Run("one range", func(t *testing.T) {
		for _, srv := range []*Server{ours, theirs} {
			res, body := getBlobRange(t, srv, repo, dgst, "bytes=1000-70999")
			require.Equal(t, http.StatusPartialContent, res.StatusCode)
			assert.Equal(t, data[1000:71000], body)
			assert.Equal(t, fmt.Sprintf("bytes 1000-70999/%d", len(data)), res.Header.Get("Content-Range"))
			assert.Equal(t, dgst, res.Header.Get("Docker-Content-Digest"))
			assert.Equal(t, `"`+dgst+`"`, res.Header.Get("ETag"))
			assert.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"))
			assert.Equal(t, "registry/2.0", res.Header.Get("Docker-Distribution-API-Version"))
		}
	})
	t.Run("several ranges: multipart", func(t *testing.T) {
		for _, srv := range []*Server{ours, theirs} {
			res, body := getBlobRange(t, srv, repo, dgst, "bytes=0-9,2000000-2100000")
			require.Equal(t, http.StatusPartialContent, res.StatusCode)
			mt, params, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
			require.NoError(t, err)
			require.Equal(t, "multipart/byteranges", mt)
			mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
			var parts [][]byte
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				b, err := io.ReadAll(p)
				require.NoError(t, err)
				parts = append(parts, b)
			}
			assert.Equal(t, [][]byte{data[0:10], data[2000000:2100001]}, parts)
		}
	})
	t.Run("the same answers as distribution", func(t *testing.T) {
		for _, rng := range []string{"bytes=5-5", "bytes=-100", fmt.Sprintf("bytes=%d-", len(data)-7), fmt.Sprintf("bytes=%d-%d", len(data), len(data)+10), "bytes=x-y"} {
			r1, b1 := getBlobRange(t, ours, repo, dgst, rng)
			r2, b2 := getBlobRange(t, theirs, repo, dgst, rng)
			assert.Equal(t, r2.StatusCode, r1.StatusCode, "range %q", rng)
			assert.Equal(t, b2, b1, "range %q", rng)
			assert.Equal(t, r2.Header.Get("Content-Range"), r1.Header.Get("Content-Range"), "range %q", rng)
		}
	})
	t.Run("a blob not linked into the repository is unknown there", func(t *testing.T) {
		res, body := getBlobRange(t, ours, "envd/other/proj", dgst, "bytes=0-99")
		assert.Equal(t, http.StatusNotFound, res.StatusCode)
		assert.Contains(t, string(body), "BLOB_UNKNOWN")
	})
	t.Run("paths that leave the repository are not served from files", func(t *testing.T) {
		for _, p := range []string{
			"envd/other/../admin/proj", "envd/admin/proj/..", "../v2/envd/admin/proj", "envd//admin/proj", "Envd/admin/proj",
		} {
			res, _ := getBlobRange(t, ours, p, dgst, "bytes=0-99")
			assert.NotEqual(t, http.StatusPartialContent, res.StatusCode, "path %q", p)
			if res.StatusCode == http.StatusMovedPermanently {
				// distribution's redirect to the clean path, checked there
				assert.NotContains(t, res.Header.Get("Location"), "..", "path %q", p)
			}
		}
		assert.Nil(t, blobPath.FindStringSubmatch("/v2/a/../b/blobs/"+dgst))
	})
	t.Run("without a range: distribution", func(t *testing.T) {
		res, body := getBlobRange(t, ours, repo, dgst, "")
		require.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, data, body)
	})
	t.Run("unauthenticated: refused before any file is read", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, "http://"+ours.Addr()+"/v2/"+repo+"/blobs/"+dgst, nil)
		require.NoError(t, err)
		req.Header.Set("Range", "bytes=0-9")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	})
}

// BenchmarkBlobRange: what a lazy node's chunk reads cost the registry,
// answered from the blob's file (envd) and by distribution, for a small
// file's range and a 4 MiB chunk's compressed range, at random offsets of
// a 64 MiB blob. -benchmem counts the server's allocations (same process).
func BenchmarkBlobRange(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	const repo = "envd/admin/bench"
	for _, side := range []struct {
		name string
		opts []Option
	}{{"envd", nil}, {"distribution", []Option{withDistributionRanges()}}} {
		srv := startRegistryWith(b, side.opts...)
		dgst := pushBlob(b, srv, repo, data)
		url := "http://" + srv.Addr() + "/v2/" + repo + "/blobs/" + dgst
		a := srv.Access().Node
		for _, size := range []int{60 << 10, 1536 << 10} {
			b.Run(fmt.Sprintf("side=%s/range=%dKiB", side.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				rng := rand.New(rand.NewPCG(1, 2))
				for b.Loop() {
					off := rng.IntN(len(data) - size)
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					req.SetBasicAuth(a.User, a.Password)
					req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+size-1))
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusPartialContent || n != int64(size) {
						b.Fatalf("status %d, %d bytes", res.StatusCode, n)
					}
				}
			})
		}
	}
}
