package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
)

// OperationCore follows and cancels operations (saves, builds, restores,
// migrations, GCs).
type OperationCore interface {
	GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	// OperationEvents returns the operation's events with Seq > after, in
	// order.
	OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error)
}

type operations struct {
	core  OperationCore
	admit admitFunc
	// poll is how often a stream asks the core for new events; keepAlive
	// how often an idle stream sends a comment.
	poll, keepAlive time.Duration
}

func (g operations) routes() []route {
	return []route{
		{http.MethodGet, "/operations/:id", handle(http.StatusOK, func(r in, _ none) (types.Operation, error) {
			return g.core.GetOperation(r.ctx, r.p, r.param("id"))
		})},
		{http.MethodDelete, "/operations/:id", handle(http.StatusAccepted, func(r in, _ none) (types.Operation, error) {
			return g.core.CancelOperation(r.ctx, r.p, r.param("id"))
		})},
		{http.MethodGet, "/operations/:id/events", g.events},
	}
}

// Server-sent events of GET /v1/operations/:id/events.
//
// Each event of the operation's log is sent as
//
//	id: <seq>
//	event: <type>
//	data: <the types.Event as JSON>
//
// The stream starts after the sequence number in the Last-Event-ID header,
// else after ?after=N, else from the beginning. Once the operation is done
// and every event was sent, a final event without an id,
//
//	event: end
//	data: <the types.Operation as JSON>
//
// closes the stream. An error while streaming is sent as "event: error" with
// the usual error body as data. Idle streams get a comment line now and then.
// A client that goes away ends the stream, never the operation.
//
// With "Accept: application/json" (and no text/event-stream) or ?wait=false
// the handler answers the events after the cursor as one JSON array instead.
const (
	SSEEventEnd   = "end"
	SSEEventError = "error"
)

func (g operations) events(c *gin.Context) {
	ctx := c.Request.Context()
	p, id := principal(c), c.Param("id")
	after, err := eventCursor(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if wantsEventList(c) {
		evs, err := items(g.core.OperationEvents(ctx, p, id, after))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, evs)
		return
	}
	// Answer a missing operation with a plain error before committing to a
	// 200 stream.
	op, err := g.core.GetOperation(ctx, p, id)
	if err != nil {
		writeError(c, err)
		return
	}
	release, err := g.admit(p, types.AdmitEvents)
	if err != nil {
		writeError(c, err)
		return
	}
	defer release()
	w := c.Writer
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	w.Flush()

	ticker := time.NewTicker(g.poll)
	defer ticker.Stop()
	lastWrite := time.Now()
	for first := true; ; first = false {
		if !first {
			// The operation is read before its events: when it is done,
			// every event it will ever have is in the read that follows.
			if op, err = g.core.GetOperation(ctx, p, id); err != nil {
				sendStreamError(c, err)
				return
			}
		}
		evs, err := g.core.OperationEvents(ctx, p, id, after)
		if err != nil {
			sendStreamError(c, err)
			return
		}
		wrote := false
		for _, ev := range evs {
			if ev.Seq <= after {
				continue
			}
			writeSSE(c, strconv.Itoa(ev.Seq), ev.Type, ev)
			after, wrote = ev.Seq, true
		}
		if op.Done() {
			writeSSE(c, "", SSEEventEnd, op)
			w.Flush()
			return
		}
		if !wrote && time.Since(lastWrite) >= g.keepAlive {
			_, _ = w.WriteString(": keep-alive\n\n")
			wrote = true
		}
		if wrote {
			w.Flush()
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// eventCursor returns the sequence number the stream starts after.
func eventCursor(c *gin.Context) (int, error) {
	src, s := "Last-Event-ID header", c.GetHeader("Last-Event-ID")
	if s == "" {
		src, s = "query parameter after", c.Query("after")
	}
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, invalidArgument("%s %q: must be a non-negative integer", src, s)
	}
	return n, nil
}

func wantsEventList(c *gin.Context) bool {
	if c.Query("wait") == "false" {
		return true
	}
	accept := c.GetHeader("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/event-stream")
}

// writeSSE writes one event in a single Write. id "" omits the id line, so
// the client's last event id stays the last real event's.
func writeSSE(c *gin.Context, id, typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(types.ErrorBody{Error: types.ErrorDetail{Code: "internal", Message: err.Error(), RequestID: requestIDOf(c)}})
		typ = SSEEventError
	}
	if typ == "" {
		typ = "message"
	}
	typ = strings.NewReplacer("\r", " ", "\n", " ").Replace(typ)
	var b bytes.Buffer
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + typ + "\n")
	// json.Marshal escapes newlines inside strings, so data is one line.
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	_, _ = c.Writer.Write(b.Bytes())
}

func sendStreamError(c *gin.Context, err error) {
	if c.Request.Context().Err() != nil {
		return // the client is gone
	}
	_, body := errorResponse(c, err)
	writeSSE(c, "", SSEEventError, body)
	c.Writer.Flush()
}
