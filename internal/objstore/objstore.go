// Package objstore stores opaque objects (logs, volume archives, hibernated
// layers) by key.
//
// Terms:
//
//   - key: a slash-separated name such as "volumes/t1/p1/work/3.tar.zst".
//     Keys are relative (no leading "/"), have no empty segments (no "//", no
//     trailing "/"), no "." or ".." segments and no NUL byte. Anything else
//     is refused with errdefs.ErrInvalidArgument, by every implementation,
//     so a key that works against the embedded directory store also works
//     against S3 and cannot escape the directory store's root.
//   - prefix: a plain string prefix of keys, as in S3 listing. "" lists
//     everything; "logs/" lists the keys under logs.
//
// Two implementations: S3 (any S3 server, through minio-go) and Dir (files
// under a directory, the embedded default of `envd up`).
package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// Store is the object storage envd needs.
type Store interface {
	// Put stores the content of r under key, replacing any object there.
	// size is the exact length of r, or -1 when unknown (a stream: S3 then
	// uploads in parts). A reader that yields a different number of bytes
	// than a non-negative size fails the Put. The object becomes visible
	// only once complete: a failed Put leaves the previous object, or none.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object at key. errdefs.ErrNotFound when it is missing.
	// The caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the object at key. A missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the objects whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// ValidateKey reports whether key is acceptable to every Store, wrapping
// errdefs.ErrInvalidArgument with the reason when it is not.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("object key is empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(key) > 1024 {
		return fmt.Errorf("object key %.40q...: longer than 1024 bytes: %w", key, errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("object key %q: must not start with /: %w", key, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsRune(key, 0) {
		return fmt.Errorf("object key %q: contains a NUL byte: %w", key, errdefs.ErrInvalidArgument)
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("object key %q: empty segment: %w", key, errdefs.ErrInvalidArgument)
		case ".", "..":
			return fmt.Errorf("object key %q: %q segment: %w", key, seg, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// validatePrefix accepts "" and anything that could begin a valid key.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// A prefix ending in "/" is a valid key with a final segment to come;
	// a prefix ending mid-segment is a valid key as it stands.
	if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("prefix %q: %w", prefix, err)
	}
	return nil
}

// exactReader fails when r yields fewer or more than remaining bytes. It
// looks one byte ahead once remaining reaches zero, so a consumer that reads
// exactly the announced size (minio-go does) still sees the error before it
// completes the upload.
type exactReader struct {
	r         io.Reader
	remaining int64
	err       error
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.remaining == 0 {
		if e.extra() {
			return 0, e.err
		}
		return 0, io.EOF
	}
	if int64(len(p)) > e.remaining {
		p = p[:e.remaining]
	}
	n, err := e.r.Read(p)
	e.remaining -= int64(n)
	switch {
	case err == io.EOF && e.remaining > 0:
		e.err = fmt.Errorf("reader ended %d bytes short of the announced size: %w", e.remaining, errdefs.ErrInvalidArgument)
		return n, e.err
	case err != nil && err != io.EOF:
		return n, err
	case e.remaining == 0 && e.extra():
		return n, e.err
	}
	return n, nil
}

// extra reports whether r has bytes beyond the announced size.
func (e *exactReader) extra() bool {
	var b [1]byte
	n, _ := io.ReadFull(e.r, b[:])
	if n > 0 {
		e.err = fmt.Errorf("reader is longer than the announced size: %w", errdefs.ErrInvalidArgument)
		return true
	}
	return false
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
