package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/errdefs"
)

// FileCore serves the file API (docs/api.md, "Files"): the root of an
// instance's filesystem, opened for one request as a user, and the watch
// stream.
type FileCore interface {
	// OpenFiles opens instance id's root as user as; write false lets a
	// stopped, retained instance be read without waking it.
	OpenFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, write bool) (*files.Root, error)
	WatchFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, path string, recursive bool, emit func(types.FileEvent) error) error
	// MaxFileBytes is the node's limit on a write or an archive upload.
	MaxFileBytes() int64
}

// FileTypeHeader tells a GET .../files answer's kind: "dir" (the body is a
// FileList) or "file" (the body is the file's content, which may be JSON
// too).
const FileTypeHeader = "X-Envd-File-Type"

type fileRoutes struct {
	core      FileCore
	admit     admitFunc // a watch counts as an event stream (types.AdmitEvents), an archive as types.AdmitArchives
	keepAlive time.Duration
}

func (g fileRoutes) routes() []route {
	return []route{
		{http.MethodGet, "/instances/:i/files", g.get},
		{http.MethodPut, "/instances/:i/files", handle(http.StatusOK, g.put)},
		{http.MethodDelete, "/instances/:i/files", handle(http.StatusNoContent, func(r in, _ none) (none, error) {
			recursive, err := boolQuery(r.c, "recursive")
			if err != nil {
				return none{}, err
			}
			return none{}, g.with(r, true, func(root *files.Root) error {
				return root.Remove(r.ctx, r.c.Query("path"), recursive)
			})
		})},
		{http.MethodPost, "/instances/:i/files/mkdir", handle(http.StatusOK, func(r in, req types.FileMkdirRequest) (fi types.FileInfo, err error) {
			mode, ok, err := files.ParseMode(req.Mode)
			if err != nil {
				return fi, err
			}
			if !ok {
				mode = 0o755
			}
			err = g.with(r, true, func(root *files.Root) (err error) {
				fi, err = root.Mkdir(r.ctx, req.Path, mode, req.Parents)
				return err
			})
			return fi, err
		})},
		{http.MethodPost, "/instances/:i/files/move", handle(http.StatusOK, func(r in, req types.FileMoveRequest) (fi types.FileInfo, err error) {
			err = g.with(r, true, func(root *files.Root) (err error) {
				fi, err = root.Move(r.ctx, req.From, req.To, req.Overwrite)
				return err
			})
			return fi, err
		})},
		{http.MethodPost, "/instances/:i/files/copy", handle(http.StatusOK, func(r in, req types.FileMoveRequest) (fi types.FileInfo, err error) {
			err = g.with(r, true, func(root *files.Root) (err error) {
				fi, err = root.Copy(r.ctx, req.From, req.To, req.Overwrite)
				return err
			})
			return fi, err
		})},
		{http.MethodGet, "/instances/:i/files/archive", g.archiveOut},
		{http.MethodPost, "/instances/:i/files/archive", handle(http.StatusOK, g.archiveIn)},
		{http.MethodGet, "/instances/:i/files/watch", g.watch},
	}
}

// fileUser reads the query parameters user, uid and gid.
func fileUser(c *gin.Context) (types.FileUser, error) {
	u := types.FileUser{User: c.Query("user")}
	for _, q := range []struct {
		name string
		dst  **int
	}{{"uid", &u.UID}, {"gid", &u.GID}} {
		s, ok := c.GetQuery(q.name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return u, invalidArgument("query parameter %s %q: a non-negative integer is expected", q.name, s)
		}
		*q.dst = &n
	}
	return u, nil
}

func boolQuery(c *gin.Context, name string) (bool, error) {
	s := c.Query(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, invalidArgument("query parameter %s %q: 1, true, 0 or false expected", name, s)
	}
	return b, nil
}

// with opens the instance's root for one request and closes it after fn.
func (g fileRoutes) with(r in, write bool, fn func(*files.Root) error) error {
	as, err := fileUser(r.c)
	if err != nil {
		return err
	}
	// A wake waits as the client's Prefer: wait=N asks (idle.go).
	root, err := g.core.OpenFiles(wakeContext(r.c), r.p, r.param("i"), as, write)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root)
}

// get answers a directory's listing as JSON, or a file's content with
// ranges (http.ServeContent: Range, 206, Content-Range, Accept-Ranges,
// Content-Type from the name or sniffed, Last-Modified, Content-Length).
func (g fileRoutes) get(c *gin.Context) {
	r := in{ctx: c.Request.Context(), p: principal(c), c: c}
	p := c.Query("path")
	err := g.with(r, false, func(root *files.Root) error {
		fi, err := root.Stat(r.ctx, p)
		if err != nil {
			return err
		}
		if fi.Type == types.FileTypeDir {
			page, _, err := r.page()
			if err != nil {
				return err
			}
			l, err := root.List(r.ctx, p, files.ListOptions{Limit: page.Limit, Token: page.Token})
			if err != nil {
				return err
			}
			if l.NextPageToken != "" {
				u := *c.Request.URL
				q := u.Query()
				q.Set("page_token", l.NextPageToken)
				c.Header("Link", fmt.Sprintf(`<%s>; rel="next"`, (&url.URL{Path: u.Path, RawQuery: q.Encode()}).String()))
			}
			c.Header(FileTypeHeader, types.FileTypeDir)
			c.JSON(http.StatusOK, l)
			return nil
		}
		f, fi, err := root.OpenFile(r.ctx, p)
		if err != nil {
			return err
		}
		defer f.Close()
		if root.ReadOnly() {
			c.Header("X-Envd-Read-Only", "true")
		}
		c.Header(FileTypeHeader, types.FileTypeFile)
		http.ServeContent(c.Writer, c.Request, fi.Name, fi.ModTime, f)
		return nil
	})
	if err != nil {
		writeError(c, err)
	}
}

func (g fileRoutes) put(r in, _ none) (fi types.FileInfo, err error) {
	mode, setMode, err := files.ParseMode(r.c.Query("mode"))
	if err != nil {
		return fi, err
	}
	parents, err := boolQuery(r.c, "mkdir")
	if err != nil {
		return fi, err
	}
	limit := g.core.MaxFileBytes()
	if r.c.Request.ContentLength > limit {
		return fi, tooLarge(r.c.Query("path"), limit)
	}
	err = g.with(r, true, func(root *files.Root) (err error) {
		fi, err = root.WriteFile(r.ctx, r.c.Query("path"), r.c.Request.Body, files.WriteOptions{Mode: mode, SetMode: setMode, Parents: parents, MaxBytes: limit})
		return err
	})
	return fi, err
}

func tooLarge(p string, limit int64) error {
	return errdefs.WithDetails(fmt.Errorf("%s: more than the node's limit of %d bytes: %w", p, limit, errdefs.ErrTooLarge),
		map[string]any{"limit_bytes": limit})
}

// archiveOut streams a tar (or tar.zst) of a directory. Errors found before
// the first byte are answered as usual; a later one cuts the connection
// (abortStream).
func (g fileRoutes) archiveOut(c *gin.Context) {
	r := in{ctx: c.Request.Context(), p: principal(c), c: c}
	format := c.DefaultQuery("format", files.FormatTar)
	if err := files.CheckFormat(format); err != nil {
		writeError(c, err)
		return
	}
	p := c.Query("path")
	release, err := g.admit(r.p, types.AdmitArchives)
	if err != nil {
		writeError(c, err)
		return
	}
	defer release()
	err = g.with(r, false, func(root *files.Root) error {
		fi, err := root.Stat(r.ctx, p)
		if err != nil {
			return err
		}
		ct, ext := "application/x-tar", ".tar"
		if format == files.FormatTarZstd {
			ct, ext = "application/zstd", ".tar.zst"
		}
		name := fi.Name
		if name == "/" {
			name = "root"
		}
		w := &lazyHeader{c: c, contentType: ct, filename: name + ext}
		err = root.WriteArchive(r.ctx, p, w, format)
		if err != nil && w.started {
			abortStream(c)
			return nil
		}
		if err == nil {
			w.start()
		}
		return err
	})
	if err != nil {
		writeError(c, err)
	}
}

// abortStream ends an answer whose 200 is sent but whose body failed: the
// connection is closed before the chunked body's end, so the client sees
// an unexpected EOF rather than a stream that merely looks short.
func abortStream(c *gin.Context) {
	c.Abort()
	if conn, _, err := c.Writer.Hijack(); err == nil {
		_ = conn.Close()
	}
}

// lazyHeader commits the 200 and its headers at the first byte, so that an
// error found before any can still be answered with its status.
type lazyHeader struct {
	c                     *gin.Context
	contentType, filename string
	started               bool
}

func (w *lazyHeader) start() {
	if w.started {
		return
	}
	w.started = true
	w.c.Header("Content-Type", w.contentType)
	w.c.Header("Content-Disposition", fmt.Sprintf("attachment; filename=%q", w.filename))
	w.c.Status(http.StatusOK)
	w.c.Writer.WriteHeaderNow()
}

func (w *lazyHeader) Write(b []byte) (int, error) {
	w.start()
	return w.c.Writer.Write(b)
}

func (g fileRoutes) archiveIn(r in, _ none) (types.FileArchiveResult, error) {
	parents, err := boolQuery(r.c, "mkdir")
	if err != nil {
		return types.FileArchiveResult{}, err
	}
	limit := g.core.MaxFileBytes()
	p := r.c.Query("path")
	if r.c.Request.ContentLength > limit {
		return types.FileArchiveResult{}, tooLarge(p, limit)
	}
	release, err := g.admit(r.p, types.AdmitArchives)
	if err != nil {
		return types.FileArchiveResult{}, err
	}
	defer release()
	var n int
	err = g.with(r, true, func(root *files.Root) (err error) {
		n, err = root.ExtractArchive(r.ctx, p, r.c.Request.Body, files.ExtractOptions{Parents: parents, MaxBytes: limit})
		return err
	})
	if err != nil {
		return types.FileArchiveResult{}, err
	}
	return types.FileArchiveResult{Path: p, Entries: n}, nil
}

// Server-sent events of GET /v1/instances/{i}/files/watch: each change is
//
//	event: <create|modify|delete|move|overflow>
//	data: <the types.FileEvent as JSON>
//
// in the order the kernel saw them; idle streams get a comment line now
// and then; "event: end" (data: {"reason": ...}) closes the stream when
// the instance stops or the directory goes away, "event: error" on an
// error after the stream started.
func (g fileRoutes) watch(c *gin.Context) {
	r := in{ctx: c.Request.Context(), p: principal(c), c: c}
	as, err := fileUser(c)
	if err != nil {
		writeError(c, err)
		return
	}
	recursive, err := boolQuery(c, "recursive")
	if err != nil {
		writeError(c, err)
		return
	}
	release, err := g.admit(r.p, types.AdmitEvents)
	if err != nil {
		writeError(c, err)
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	w := c.Writer
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		w.Flush()
	}
	events := make(chan types.FileEvent, 256)
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- g.core.WatchFiles(ctx, r.p, r.param("i"), as, c.Query("path"), recursive, func(ev types.FileEvent) error {
			select {
			case events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	// The watch is set up (or failed) before the 200 is committed: wait a
	// moment for an early error.
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(ready)
	}()
	keep := time.NewTicker(g.keepAlive)
	defer keep.Stop()
	for {
		select {
		case <-ready:
			start()
			ready = nil
		case ev := <-events:
			start()
			writeSSE(c, "", ev.Type, ev)
			w.Flush()
		case <-keep.C:
			if started {
				_, _ = w.WriteString(": keep-alive\n\n")
				w.Flush()
			}
		case err := <-done:
			for len(events) > 0 {
				ev := <-events
				start()
				writeSSE(c, "", ev.Type, ev)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				if !started {
					writeError(c, err)
					return
				}
				sendStreamError(c, err)
				return
			}
			if r.ctx.Err() != nil {
				return // the client went away
			}
			start()
			writeSSE(c, "", SSEEventEnd, map[string]string{"reason": "the instance stopped or the directory went away"})
			w.Flush()
			return
		case <-r.ctx.Done():
			cancel()
			<-done
			return
		}
	}
}

var _ io.Writer = (*lazyHeader)(nil)
