// Package tartest holds tar helpers for tests that check how archives
// that were damaged on the way are refused.
package tartest

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// FlipByteOfLargestFile rewrites a tar with one byte of its largest file
// changed: the same names and sizes, content that no longer matches its
// digest (in a checkpoint or version export, a layer or a memory chunk).
func FlipByteOfLargestFile(t testing.TB, archive []byte) []byte {
	t.Helper()
	var largest string
	var size int64
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		if h.Size > size {
			largest, size = h.Name, h.Size
		}
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr = tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read %s: %v", h.Name, err)
		}
		if h.Name == largest {
			body[len(body)/2] ^= 0xff
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("write tar: %v", err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatalf("write tar: %v", err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("write tar: %v", err)
	}
	return out.Bytes()
}
