package registry

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Ranged blob reads on the filesystem driver.
//
// A lazy node reads its layers in ranges: one GET with a Range header per
// file chunk that misses its cache, tens to hundreds per instance start.
// distribution (v3.1) serves each through its storage fileReader, which
// allocates a 4 MiB bufio buffer per request and fills it from the blob's
// offset, so a 60 KB range costs a 4 MiB allocation (zeroed, faulted in)
// and a 4 MiB copy. Under a learned lazy start that was about a seventh of
// both cores (docs/notes/lazy-restore.md, "Ranged blob reads"). blobRanges answers those
// GETs from the blob's file itself, after the same checks distribution makes
// (the blob is linked into the repository named in the path); everything
// else, and every case it does not recognize, goes to distribution.

// blobPath matches /v2/<name>/blobs/sha256:<hex>. name is distribution's
// repository grammar (lowercase components joined by separators, none of
// them "." or ".."), so it cannot step out of the repositories directory.
var blobPath = regexp.MustCompile(`^/v2/((?:[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)/blobs/sha256:([a-f0-9]{64})$`)

// blobRanges serves ranged GETs of blobs stored under root (the filesystem
// driver's rootdirectory), passing everything else to next.
type blobRanges struct {
	root string
	next http.Handler
}

// blobCacheMaxAge is distribution's Cache-Control for blobs (they are
// content-addressed).
const blobCacheMaxAge = 365 * 24 * time.Hour

func (b *blobRanges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.Header.Get("Range") == "" {
		b.next.ServeHTTP(w, r)
		return
	}
	m := blobPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		b.next.ServeHTTP(w, r)
		return
	}
	name, hex := m[1], m[2]
	dgst := "sha256:" + hex
	v2 := filepath.Join(b.root, "docker", "registry", "v2")
	// Linked into this repository, as distribution's linkedBlobStore checks.
	link, err := os.ReadFile(filepath.Join(v2, "repositories", filepath.FromSlash(name), "_layers", "sha256", hex, "link"))
	if err != nil || strings.TrimSpace(string(link)) != dgst {
		b.next.ServeHTTP(w, r) // distribution answers the 404 (or what it knows)
		return
	}
	f, err := os.Open(filepath.Join(v2, "blobs", "sha256", hex[:2], hex, "data"))
	if err != nil {
		b.next.ServeHTTP(w, r)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Docker-Distribution-API-Version", "registry/2.0")
	h.Set("Docker-Content-Digest", dgst)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", `"`+dgst+`"`)
	h.Set("Cache-Control", fmt.Sprintf("max-age=%.f", blobCacheMaxAge.Seconds()))
	// ServeContent answers the ranges (one, or multipart) from the file
	// with plain reads at their offsets.
	http.ServeContent(w, r, "", time.Time{}, f)
}
