package e2b

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// The Connect protocol (connectrpc.com's), as E2B's daemon serves it to
// the SDKs: unary calls are a POST of a JSON message answered by one;
// server streams are a POST of one enveloped message answered by a stream
// of envelopes (a flag byte, a big-endian uint32 length, the JSON), the
// last flagged end-of-stream and carrying the error, if any. Only the JSON
// codec is served: the official SDKs use it (a protobuf-coded call is
// refused with unimplemented). Messages are proto3's JSON mapping: field
// names in lowerCamelCase, bytes in base64, enums by name, oneofs as the
// set field.

const (
	contentJSON       = "application/json"
	contentStreamJSON = "application/connect+json"
	flagEndStream     = 0x02
	// maxMessage bounds one request message (a file's content does not go
	// through RPC: /files carries it).
	maxMessage = 4 << 20
)

// rpcError is a Connect error: its code and message.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// rpcCodes: Connect's code of envd's codes that are not Connect's own.
var rpcCodes = map[string]string{
	"conflict":         "aborted",
	"stale_generation": "aborted",
	"quota_exceeded":   "resource_exhausted",
	"rate_limited":     "resource_exhausted",
	"waking":           "unavailable",
	"node_unavailable": "unavailable",
	"too_large":        "invalid_argument",
}

// connectCodes are the codes of the Connect protocol.
var connectCodes = map[string]int{
	"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504, "not_found": 404,
	"already_exists": 409, "permission_denied": 403, "resource_exhausted": 429, "failed_precondition": 400,
	"aborted": 409, "out_of_range": 400, "unimplemented": 501, "internal": 500, "unavailable": 503,
	"data_loss": 500, "unauthenticated": 401,
}

// toRPCError is err as a Connect error, with envd's code mapped to
// Connect's and the message kept.
func toRPCError(err error) rpcError {
	_, code, msg := errorParts(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = "deadline_exceeded"
	}
	if c, ok := rpcCodes[code]; ok {
		code = c
	}
	if _, ok := connectCodes[code]; !ok {
		code = "unknown"
	}
	return rpcError{Code: code, Message: msg}
}

// writeRPCError answers a unary call's error.
func writeRPCError(w http.ResponseWriter, err error) {
	e := toRPCError(err)
	writeJSON(w, connectCodes[e.Code], e)
}

// sandboxCall is one call's sandbox: the caller's client and the instance.
type sandboxCall struct {
	c   Envd
	id  string
	env map[string]string // the sandbox's envVars
}

// sandboxFor authenticates a daemon call (X-Access-Token, the envd token
// create answered as envdAccessToken; X-API-Key or a bearer token too) and
// finds its sandbox (the E2b-Sandbox-Id header): the caller's live
// instance, else not found.
func (s *Server) sandboxFor(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, error)) (sandboxCall, bool) {
	key := strings.TrimSpace(r.Header.Get("X-Access-Token"))
	if key == "" {
		key = apiKey(r)
	}
	if key == "" {
		fail(w, &types.Error{Status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "missing access token: send X-Access-Token with an envd API token (the sandbox's envdAccessToken)"})
		return sandboxCall{}, false
	}
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		fail(w, fmt.Errorf("missing E2b-Sandbox-Id header: the sandbox to address (the SDKs send it): %w", errdefs.ErrInvalidArgument))
		return sandboxCall{}, false
	}
	c, err := s.newClient(key)
	var in types.Instance
	if err == nil {
		in, _, err = instance(c, r, id)
	}
	if err != nil {
		fail(w, err)
		return sandboxCall{}, false
	}
	recs, err := s.store.E2BSandboxes(r.Context(), []string{in.ID})
	if err != nil {
		fail(w, err)
		return sandboxCall{}, false
	}
	return sandboxCall{c: c, id: in.ID, env: recs[in.ID].Env}, true
}

// decodeMessage decodes one JSON message; unknown fields are ignored, as
// proto3 JSON parsers may.
func decodeMessage(b []byte, v any) error {
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("message: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// callContext bounds ctx by the call's Connect-Timeout-Ms, if any.
func callContext(ctx context.Context, r *http.Request) (context.Context, context.CancelFunc) {
	if ms, err := strconv.ParseInt(r.Header.Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

// unary serves a unary method: fn answers the response message.
func unary[Req any](s *Server, fn func(ctx context.Context, sb sandboxCall, req *Req) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ct := mediaType(r); ct != contentJSON {
			writeRPCError(w, &types.Error{Status: http.StatusNotImplemented, Code: "unimplemented",
				Message: fmt.Sprintf("content type %q: only the JSON codec (application/json) is served", ct)})
			return
		}
		sb, ok := s.sandboxFor(w, r, writeRPCError)
		if !ok {
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
		if err == nil && len(b) > maxMessage {
			err = fmt.Errorf("message larger than %d bytes: %w", maxMessage, errdefs.ErrInvalidArgument)
		}
		req := new(Req)
		if err == nil {
			err = decodeMessage(b, req)
		}
		if err != nil {
			writeRPCError(w, err)
			return
		}
		ctx, cancel := callContext(r.Context(), r)
		defer cancel()
		res, err := fn(ctx, sb, req)
		if err != nil {
			writeRPCError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// streamSender sends a server stream's messages.
type streamSender struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s streamSender) envelope(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	hdr := make([]byte, 5, 5+len(b))
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := s.w.Write(append(hdr, b...)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// send sends one message.
func (s streamSender) send(v any) error { return s.envelope(0, v) }

// serverStream serves a server-streaming method: fn sends the messages and
// returns the stream's end (nil, or the error the end carries).
func serverStream[Req any](s *Server, fn func(ctx context.Context, sb sandboxCall, req *Req, keepAlive time.Duration, send func(any) error) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ct := mediaType(r); ct != contentStreamJSON {
			writeRPCError(w, &types.Error{Status: http.StatusNotImplemented, Code: "unimplemented",
				Message: fmt.Sprintf("content type %q: only the JSON codec (application/connect+json) is served", ct)})
			return
		}
		// Before the stream starts, errors are answered in its end message
		// too: a streaming client reads no other.
		out := streamSender{w: w, rc: http.NewResponseController(w)}
		started := false
		start := func() {
			if !started {
				started = true
				w.Header().Set("Content-Type", contentStreamJSON)
				w.WriteHeader(http.StatusOK)
			}
		}
		end := func(err error) {
			start()
			body := map[string]any{}
			if err != nil {
				body["error"] = toRPCError(err)
			}
			_ = out.envelope(flagEndStream, body)
		}
		sb, ok := s.sandboxFor(w, r, func(_ http.ResponseWriter, err error) { end(err) })
		if !ok {
			return
		}
		req := new(Req)
		if err := readEnvelope(r.Body, req); err != nil {
			end(err)
			return
		}
		keepAlive := 30 * time.Second
		if secs, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && secs > 0 && secs < 3600 {
			keepAlive = time.Duration(secs) * time.Second
		}
		ctx, cancel := callContext(r.Context(), r)
		defer cancel()
		err := fn(ctx, sb, req, keepAlive, func(v any) error { start(); return out.send(v) })
		end(err)
	}
}

// readEnvelope reads a stream request's one message into v.
func readEnvelope(r io.Reader, v any) error {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // no message: all fields default
		}
		return fmt.Errorf("request envelope: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if hdr[0]&0x01 != 0 {
		return unimplemented("compressed request messages are not served")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return fmt.Errorf("message larger than %d bytes: %w", maxMessage, errdefs.ErrInvalidArgument)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("request message: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return decodeMessage(b, v)
}

// mediaType is r's Content-Type without parameters.
func mediaType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.TrimSpace(strings.ToLower(ct))
}

// unimplemented is the error of what the E2B surface does not map.
func unimplemented(format string, args ...any) error {
	return &types.Error{Status: http.StatusNotImplemented, Code: "unimplemented",
		Message: fmt.Sprintf(format, args...) + ` (docs/api.md, "E2B compatibility")`}
}
