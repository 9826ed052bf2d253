package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
)

// IdleCore sets a project's idle stop (docs/api.md, "Idle stop and wake on
// access"). Waking happens in the routes that reach an instance (exec with
// wake; files, ports and SSH), through the core's WakeInstance.
type IdleCore interface {
	// SetProjectIdle sets a project's idle setting; one above the tenant's
	// maximum is refused with invalid_argument.
	SetProjectIdle(ctx context.Context, p types.Principal, project string, req types.IdleSetting) (types.Project, error)
}

type idle struct{ core IdleCore }

func (g idle) routes() []route {
	return []route{
		{http.MethodPut, "/projects/:p/idle", handle(http.StatusOK, func(r in, req types.IdleSetting) (types.Project, error) {
			return g.core.SetProjectIdle(r.ctx, r.p, r.param("p"), req)
		})},
	}
}

// wakeContext is the request's context with the client's wait for a wake:
// RFC 7240 "Prefer: wait=N" (seconds; wait=0: answer 503 waking at once
// rather than wait) cuts the node's wake wait.
func wakeContext(c *gin.Context) context.Context {
	ctx := c.Request.Context()
	for _, h := range c.Request.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			if n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`)); err == nil && n >= 0 {
				return types.WithWakeWait(ctx, time.Duration(n)*time.Second)
			}
		}
	}
	return ctx
}
