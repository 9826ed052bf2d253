package api

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// VersionCore makes a project's versions (save, build, migrate) and moves
// its current version.
type VersionCore interface {
	// Save starts a save operation. A repeated call with the same non-empty
	// idempotencyKey returns the same operation.
	Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error)
	// Build starts an operation of kind "build".
	Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error)
	// Migrate starts an operation of kind "migrate".
	Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, idempotencyKey string) (types.Operation, error)
	ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error)
	// ListVersionsPage is one page of ListVersions and the next page's
	// token ("" after the last).
	ListVersionsPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Version, string, error)
	GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error)
	// SetCurrent moves the project's current version by compare-and-swap; a
	// lost swap is an errdefs.ErrConflict.
	SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error)
	PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error)
	// VersionChanges tells what changed from version against (0: n's
	// parent) to n, listing at most limit entries of each kind (0: the
	// default).
	VersionChanges(ctx context.Context, p types.Principal, project string, n, against, limit int) (types.Changes, error)
	// InstanceChanges tells what a save of the instance would capture now,
	// with the paths a save leaves out and why.
	InstanceChanges(ctx context.Context, p types.Principal, id string, limit int) (types.Changes, error)
	// ExportVersion writes version n as a tar of an OCI image layout to w;
	// an error before anything was written is an ordinary error answer.
	ExportVersion(ctx context.Context, p types.Principal, project string, n int, w io.Writer) error
	// Fork starts an operation of kind "fork": the instance saved as a
	// version that is not current, and a second instance started from it.
	Fork(ctx context.Context, p types.Principal, id string, req types.ForkRequest, idempotencyKey string) (types.Operation, error)
}

type versions struct{ core VersionCore }

func (g versions) routes() []route {
	return []route{
		{http.MethodPost, "/instances/:i/save", started(func(r in, req types.SaveRequest) (types.Operation, error) {
			return g.core.Save(r.ctx, r.p, r.param("i"), req, r.key())
		})},
		{http.MethodPost, "/instances/:i/fork", started(func(r in, req types.ForkRequest) (types.Operation, error) {
			return g.core.Fork(r.ctx, r.p, r.param("i"), req, r.key())
		})},
		{http.MethodPost, "/projects/:p/builds", started(func(r in, req types.BuildRequest) (types.Operation, error) {
			return g.core.Build(r.ctx, r.p, r.param("p"), req, r.key())
		})},
		{http.MethodPost, "/projects/:p/migrations", started(func(r in, req types.MigrateRequest) (types.Operation, error) {
			return g.core.Migrate(r.ctx, r.p, r.param("p"), req, r.key())
		})},
		{http.MethodGet, "/projects/:p/versions", handle(http.StatusOK, func(r in, _ none) ([]types.Version, error) {
			page, ok, err := r.page()
			if err != nil {
				return nil, err
			}
			if !ok {
				return items(g.core.ListVersions(r.ctx, r.p, r.param("p")))
			}
			return paged(r, func() ([]types.Version, string, error) {
				return g.core.ListVersionsPage(r.ctx, r.p, r.param("p"), page)
			})
		})},
		{http.MethodGet, "/projects/:p/versions/:n", handle(http.StatusOK, func(r in, _ none) (types.Version, error) {
			n, err := r.version()
			if err != nil {
				return types.Version{}, err
			}
			return g.core.GetVersion(r.ctx, r.p, r.param("p"), n)
		})},
		{http.MethodPost, "/projects/:p/current", handle(http.StatusOK, func(r in, req types.SetCurrentRequest) (types.Project, error) {
			return g.core.SetCurrent(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodGet, "/projects/:p/versions/:n/changes", handle(http.StatusOK, func(r in, _ none) (types.Changes, error) {
			n, err := r.version()
			if err != nil {
				return types.Changes{}, err
			}
			against, err := r.queryInt("against")
			if err != nil {
				return types.Changes{}, err
			}
			limit, err := r.queryInt("limit")
			if err != nil {
				return types.Changes{}, err
			}
			return g.core.VersionChanges(r.ctx, r.p, r.param("p"), n, against, limit)
		})},
		{http.MethodGet, "/instances/:i/changes", handle(http.StatusOK, func(r in, _ none) (types.Changes, error) {
			limit, err := r.queryInt("limit")
			if err != nil {
				return types.Changes{}, err
			}
			return g.core.InstanceChanges(r.ctx, r.p, r.param("i"), limit)
		})},
		{http.MethodGet, "/projects/:p/versions/:n/export", g.export},
		{http.MethodPost, "/projects/:p/versions/:n/pin", g.pin(true)},
		{http.MethodDelete, "/projects/:p/versions/:n/pin", g.pin(false)},
	}
}

func (g versions) pin(pinned bool) gin.HandlerFunc {
	return handle(http.StatusOK, func(r in, _ none) (types.Version, error) {
		n, err := r.version()
		if err != nil {
			return types.Version{}, err
		}
		return g.core.PinVersion(r.ctx, r.p, r.param("p"), n, pinned)
	})
}

// export streams version :n as an OCI image layout tar. Once the first
// byte is out the status cannot change: a later failure aborts the
// connection, so the client sees a cut stream, never a short valid tar.
func (g versions) export(c *gin.Context) {
	r := in{ctx: c.Request.Context(), p: principal(c), c: c}
	n, err := r.version()
	if err != nil {
		writeError(c, err)
		return
	}
	streamTar(c, fmt.Sprintf("%s-%d.oci.tar", r.param("p"), n), func(w io.Writer) error {
		return g.core.ExportVersion(r.ctx, r.p, r.param("p"), n, w)
	})
}

// streamTar answers with the tar write writes, as an attachment named
// name. An error before the first byte is the answer; after it, the
// connection is aborted.
func streamTar(c *gin.Context, name string, write func(io.Writer) error) {
	w := &startedWriter{c: c, name: name}
	if err := write(w); err != nil {
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

// startedWriter writes the answer's headers at the first write.
type startedWriter struct {
	c       *gin.Context
	name    string
	started bool
}

func (w *startedWriter) start() {
	w.started = true
	h := w.c.Writer.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": w.name}))
	w.c.Status(http.StatusOK)
	w.c.Writer.WriteHeaderNow()
}

func (w *startedWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.start()
	}
	return w.c.Writer.Write(p)
}
