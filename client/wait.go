package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Server-sent event types besides the operation's own (see package api).
const (
	sseEnd   = "end"
	sseError = "error"
)

const (
	// maxStreamFailures is how many event streams in a row may fail without
	// delivering an event before WaitOperation falls back to polling.
	maxStreamFailures = 3
	// maxPollFailures is how many polls in a row may fail before
	// WaitOperation gives up.
	maxPollFailures = 10
)

// permanentCodes are error codes that a retry cannot fix.
var permanentCodes = map[string]bool{
	"invalid_argument":  true,
	"not_found":         true,
	"unauthenticated":   true,
	"permission_denied": true,
}

func permanent(err error) bool {
	var e *types.Error
	return errors.As(err, &e) && permanentCodes[e.Code]
}

// WaitOperation follows the operation until it is done and returns it in its
// final state (which may be failed or canceled: check State and Error).
//
// onEvent, when not nil, is called for each event of the operation's log in
// order, each exactly once, from the same goroutine. WaitOperation follows
// the server-sent event stream, reconnects from the last event it saw when
// the stream breaks, and falls back to polling when the stream keeps
// failing. Canceling ctx stops waiting; it never cancels the operation.
func (c *Client) WaitOperation(ctx context.Context, id string, onEvent func(types.Event)) (types.Operation, error) {
	last := 0
	deliver := func(ev types.Event) {
		if ev.Seq <= last {
			return
		}
		last = ev.Seq
		if onEvent != nil {
			onEvent(ev)
		}
	}
	for failures := 0; failures < maxStreamFailures; {
		before := last
		op, err := c.streamEvents(ctx, id, last, deliver)
		if err == nil {
			return op, nil
		}
		if ctx.Err() != nil {
			return types.Operation{}, ctx.Err()
		}
		if permanent(err) {
			return types.Operation{}, err
		}
		if last > before {
			failures = 0
		} else {
			failures++
		}
		if err := sleep(ctx, time.Duration(failures)*c.pollInterval/2); err != nil {
			return types.Operation{}, err
		}
	}
	return c.pollOperation(ctx, id, &last, deliver)
}

// streamEvents reads one event stream starting after seq after. It returns
// the operation when the stream's end event arrives, else an error.
func (c *Client) streamEvents(ctx context.Context, id string, after int, deliver func(types.Event)) (types.Operation, error) {
	h := http.Header{"Accept": {"text/event-stream"}}
	if after > 0 {
		h.Set("Last-Event-ID", strconv.Itoa(after))
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/operations/" + esc(id) + "/events", header: h})
	if err != nil {
		return types.Operation{}, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return types.Operation{}, fmt.Errorf("operation %s events: content type %q is not an event stream", id, ct)
	}
	br := bufio.NewReader(resp.Body)
	var evID, typ string
	var data strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return types.Operation{}, errStreamEnded
			}
			return types.Operation{}, fmt.Errorf("operation %s events: %w", id, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "": // a comment
			case "id":
				evID = value
			case "event":
				typ = value
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
			continue
		}
		// A blank line dispatches the event.
		switch typ {
		case sseEnd:
			var op types.Operation
			if err := json.Unmarshal([]byte(data.String()), &op); err != nil {
				return types.Operation{}, fmt.Errorf("operation %s events: decode end event: %w", id, err)
			}
			return op, nil
		case sseError:
			var body types.ErrorBody
			if err := json.Unmarshal([]byte(data.String()), &body); err != nil || body.Error.Code == "" {
				return types.Operation{}, fmt.Errorf("operation %s events: stream error %q", id, data.String())
			}
			return types.Operation{}, &types.Error{Code: body.Error.Code, Message: body.Error.Message, Details: body.Error.Details, RequestID: body.Error.RequestID}
		default:
			if data.Len() > 0 {
				var ev types.Event
				if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
					return types.Operation{}, fmt.Errorf("operation %s events: decode event %s: %w", id, evID, err)
				}
				if ev.Seq == 0 {
					ev.Seq, _ = strconv.Atoi(evID)
				}
				deliver(ev)
			}
		}
		evID, typ = "", ""
		data.Reset()
	}
}

// pollOperation waits by polling the operation and its event list.
func (c *Client) pollOperation(ctx context.Context, id string, last *int, deliver func(types.Event)) (types.Operation, error) {
	failures := 0
	for {
		// The operation is read before its events: when it is done, the
		// events read next are all it will ever have.
		op, err := c.GetOperation(ctx, id)
		if err == nil {
			var evs []types.Event
			evs, err = c.OperationEvents(ctx, id, *last)
			for _, ev := range evs {
				deliver(ev)
			}
			if err == nil && op.Done() {
				return op, nil
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return types.Operation{}, ctx.Err()
			}
			if failures++; permanent(err) || failures >= maxPollFailures {
				return types.Operation{}, fmt.Errorf("wait for operation %s: %w", id, err)
			}
		} else {
			failures = 0
		}
		if err := sleep(ctx, c.pollInterval); err != nil {
			return types.Operation{}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
