package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// layerPrefetch reads the TOC of the eStargz layer l of repo from the
// registry at addr (ranged GETs with the credential) and returns its
// prefetch range.
func layerPrefetch(ctx context.Context, addr string, cred registry.Credential, repo string, l registry.LayerInfo) (stargz.PrefetchRange, error) {
	ra := &httpReaderAt{ctx: ctx, url: fmt.Sprintf("http://%s/v2/%s/blobs/%s", addr, repo, l.Digest), cred: cred}
	pr, err := stargz.LayerPrefetchRange(ra, l.Size)
	if err != nil {
		return pr, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	return pr, nil
}

// prefetchSummary says what a prefetch range holds, in a few words.
func prefetchSummary(pr stargz.PrefetchRange, layerSize int64) string {
	var bytes int64
	var largest []string
	for i, f := range pr.Files {
		bytes += f.Size
		if i < 3 {
			largest = append(largest, fmt.Sprintf("%s (%s MB)", f.Path, megabytes(f.Size)))
		}
	}
	s := fmt.Sprintf("%s of %s MB, %d files (%s MB uncompressed)", megabytes(pr.Bytes), megabytes(layerSize), len(pr.Files), megabytes(bytes))
	if len(largest) > 0 {
		s += fmt.Sprintf(", largest %v", largest)
	}
	return s
}

type httpReaderAt struct {
	ctx  context.Context
	url  string
	cred registry.Credential
}

func (h *httpReaderAt) ReadAt(p []byte, off int64) (int, error) {
	req, err := http.NewRequestWithContext(h.ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth(h.cred.User, h.cred.Password)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("GET %s range %d+%d: %s", h.url, off, len(p), resp.Status)
	}
	n, err := io.ReadFull(resp.Body, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}
