package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/s3test"
)

func TestDir(t *testing.T) {
	t.Parallel()
	s, err := objstore.NewDir(t.TempDir())
	require.NoError(t, err)
	testStore(t, s)
}

func TestS3(t *testing.T) {
	t.Parallel()
	cfg := s3test.Start(t)
	s, err := objstore.NewS3(context.Background(), cfg)
	require.NoError(t, err)
	testStore(t, s)

	// NewS3 on an existing bucket reuses it.
	s2, err := objstore.NewS3(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, s2.Put(context.Background(), "again", strings.NewReader("x"), 1))
	got, err := s.List(context.Background(), "again")
	require.NoError(t, err)
	assert.Len(t, got, 1)
}

func TestS3Unavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = objstore.NewS3(ctx, objstore.S3Config{Endpoint: addr, AccessKey: "k", SecretKey: "s", Bucket: "bkt", MaxRetries: 1})
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Less(t, time.Since(start), 10*time.Second)
}

func TestS3BadBucketName(t *testing.T) {
	t.Parallel()
	_, err := objstore.NewS3(context.Background(), objstore.S3Config{Endpoint: "127.0.0.1:1", Bucket: "b"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func TestS3BadCredentials(t *testing.T) {
	t.Parallel()
	cfg := s3test.Start(t)
	cfg.SecretKey = "wrong"
	_, err := objstore.NewS3(context.Background(), cfg)
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
}

// testStore is the behaviour every Store must have.
func testStore(t *testing.T, s objstore.Store) {
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		require.NoError(t, s.Put(ctx, "rt/a.txt", strings.NewReader("hello"), 5))
		assertContent(t, s, "rt/a.txt", []byte("hello"))
		// Overwrite.
		require.NoError(t, s.Put(ctx, "rt/a.txt", strings.NewReader("bye"), 3))
		assertContent(t, s, "rt/a.txt", []byte("bye"))
		// Empty object.
		require.NoError(t, s.Put(ctx, "rt/empty", bytes.NewReader(nil), 0))
		assertContent(t, s, "rt/empty", []byte{})
	})

	t.Run("UnknownSizeMultipart", func(t *testing.T) {
		// Larger than the 16 MiB part size: two parts on S3.
		data := make([]byte, 17<<20+12345)
		_, _ = rand.Read(data)
		require.NoError(t, s.Put(ctx, "big/stream", io.MultiReader(bytes.NewReader(data)), -1))
		assertContent(t, s, "big/stream", data)
		list, err := s.List(ctx, "big/")
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, int64(len(data)), list[0].Size)
	})

	t.Run("WrongSize", func(t *testing.T) {
		err := s.Put(ctx, "size/short", strings.NewReader("abc"), 10)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		err = s.Put(ctx, "size/long", strings.NewReader("abcdef"), 3)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		list, err := s.List(ctx, "size/")
		require.NoError(t, err)
		assert.Empty(t, list, "a failed put leaves no object")
	})

	t.Run("FailedStreamLeavesOldObject", func(t *testing.T) {
		require.NoError(t, s.Put(ctx, "fail/obj", strings.NewReader("old"), 3))
		boom := errors.New("boom")
		r := io.MultiReader(strings.NewReader("partial"), errReader{boom})
		err := s.Put(ctx, "fail/obj", r, -1)
		require.Error(t, err)
		assertContent(t, s, "fail/obj", []byte("old"))
	})

	t.Run("GetMissing", func(t *testing.T) {
		_, err := s.Get(ctx, "missing/nothing")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		// A "directory" of other keys is not an object.
		require.NoError(t, s.Put(ctx, "dirlike/child", strings.NewReader("x"), 1))
		_, err = s.Get(ctx, "dirlike")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})

	t.Run("Delete", func(t *testing.T) {
		require.NoError(t, s.Put(ctx, "del/x", strings.NewReader("x"), 1))
		require.NoError(t, s.Delete(ctx, "del/x"))
		_, err := s.Get(ctx, "del/x")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		assert.NoError(t, s.Delete(ctx, "del/x"), "deleting a missing object is not an error")
		assert.NoError(t, s.Delete(ctx, "never/there"))
	})

	t.Run("List", func(t *testing.T) {
		for _, k := range []string{"ls/b", "ls/a/1", "ls/a/2", "ls-other", "lsx/y"} {
			require.NoError(t, s.Put(ctx, k, strings.NewReader(k), int64(len(k))))
		}
		keys := func(prefix string) []string {
			list, err := s.List(ctx, prefix)
			require.NoError(t, err)
			var out []string
			for _, o := range list {
				out = append(out, o.Key)
				if strings.HasPrefix(o.Key, "ls") {
					assert.Equal(t, int64(len(o.Key)), o.Size)
				}
				assert.WithinDuration(t, time.Now(), o.Modified, time.Hour)
			}
			return out
		}
		assert.Equal(t, []string{"ls/a/1", "ls/a/2", "ls/b"}, keys("ls/"))
		assert.Equal(t, []string{"ls-other", "ls/a/1", "ls/a/2", "ls/b", "lsx/y"}, keys("ls"))
		assert.Equal(t, []string{"ls/a/1", "ls/a/2"}, keys("ls/a"))
		assert.Empty(t, keys("nope/"))
		all := keys("")
		assert.Contains(t, all, "ls/b")
		assert.Contains(t, all, "rt/a.txt")
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		for _, k := range []string{"", "/abs", "a//b", "a/", "../x", "a/../b", "a/./b", ".", "a\x00b"} {
			err := s.Put(ctx, k, strings.NewReader("x"), 1)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "put %q", k)
			_, err = s.Get(ctx, k)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "get %q", k)
			err = s.Delete(ctx, k)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "delete %q", k)
		}
		_, err := s.List(ctx, "../")
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	})

	t.Run("Canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := s.Put(cctx, "canceled/x", strings.NewReader("x"), 1)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func assertContent(t *testing.T, s objstore.Store, key string, want []byte) {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	require.NoError(t, err)
	defer rc.Close()
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "content of %q: got %d bytes, want %d", key, len(got), len(want))
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
