package api

import (
	"context"
	"io"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
)

// SpecCore exports versions as build specs, keeps build contexts and
// serves operations' logs.
type SpecCore interface {
	// VersionSpec answers a build spec that makes version n again.
	VersionSpec(ctx context.Context, p types.Principal, project string, n int) (types.VersionSpec, error)
	// UploadBuildContext keeps the tar r as a build context of project.
	UploadBuildContext(ctx context.Context, p types.Principal, project string, r io.Reader) (types.BuildContext, error)
	// OperationLogs writes the operation's log to w; an error before
	// anything was written is an ordinary error answer.
	OperationLogs(ctx context.Context, p types.Principal, id string, w io.Writer) error
}

type specRoutes struct{ core SpecCore }

func (g specRoutes) routes() []route {
	return []route{
		{http.MethodGet, "/projects/:p/versions/:n/spec", handle(http.StatusOK, func(r in, _ none) (types.VersionSpec, error) {
			n, err := r.version()
			if err != nil {
				return types.VersionSpec{}, err
			}
			return g.core.VersionSpec(r.ctx, r.p, r.param("p"), n)
		})},
		{http.MethodPost, "/projects/:p/build-contexts", handle(http.StatusCreated, func(r in, _ none) (types.BuildContext, error) {
			if ct := r.c.GetHeader("Content-Type"); ct != "" {
				mt, _, err := mime.ParseMediaType(ct)
				if err != nil || (mt != "application/x-tar" && mt != "application/tar" && mt != "application/octet-stream") {
					return types.BuildContext{}, invalidArgument("content type %q: a build context is a tar (application/x-tar)", ct)
				}
			}
			return g.core.UploadBuildContext(r.ctx, r.p, r.param("p"), r.c.Request.Body)
		})},
		{http.MethodGet, "/operations/:id/logs", g.logs},
	}
}

// logs answers an operation's log as text/plain. Once the first byte is
// out the status cannot change: a later failure cuts the stream.
func (g specRoutes) logs(c *gin.Context) {
	w := &textWriter{c: c}
	if err := g.core.OperationLogs(c.Request.Context(), principal(c), c.Param("id"), w); err != nil {
		if !w.started {
			writeError(c, err)
			return
		}
		panic(http.ErrAbortHandler)
	}
	if !w.started {
		w.start()
	}
}

// textWriter writes a text/plain answer's headers at the first write.
type textWriter struct {
	c       *gin.Context
	started bool
}

func (w *textWriter) start() {
	w.started = true
	w.c.Header("Content-Type", "text/plain; charset=utf-8")
	w.c.Status(http.StatusOK)
	w.c.Writer.WriteHeaderNow()
}

func (w *textWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.start()
	}
	return w.c.Writer.Write(p)
}
