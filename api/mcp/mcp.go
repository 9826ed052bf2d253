// Package mcp serves envd as a Model Context Protocol server: tools for the
// whole life of an environment (projects, instances, exec, files, versions,
// forks, diffs, preview links), over stdio (`envd mcp`) or streamable HTTP
// (the node's /mcp).
//
// The server is a client of envd's own HTTP API through package client,
// with the caller's token, so it sees exactly what the caller's tenant sees:
// another tenant's ids answer not_found, as they do on the API. It imports
// neither the service core nor the runtime.
//
// A tool that fails answers a tool error (isError) whose text starts with
// envd's stable error code ("not_found: ...") and whose structured content
// is {"error": {"code", "message", "details"}}, the API's error body.
// Arguments the tool's input schema refuses are code invalid_argument.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServerName is the implementation name the server announces.
const ServerName = "envd"

// schemas is shared by every server made here: the HTTP handler makes one
// per request (each with the request's token), and deriving the tools'
// schemas from their Go types each time would be wasted work.
var schemas = sdk.NewSchemaCache()

// NewServer returns an MCP server whose tools call envd through c (and so
// with c's token). version is the announced implementation version.
func NewServer(c *client.Client, version string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: ServerName, Title: "envd environments", Version: version}, &sdk.ServerOptions{
		Instructions: "envd keeps versioned development environments. A project has numbered versions and a current one; " +
			"instances run from a version. Typical flow: create_instance, exec and write_file in it, save_version, " +
			"list_versions, switch_version or rollback to move current, fork_instance to branch, diff to see changes, preview_link for a port.",
		SchemaCache: schemas,
	})
	s.AddReceivingMiddleware(codeSchemaErrors)
	addTools(s, tools{c})
	return s
}

// Serve runs the MCP server on t (sdk.StdioTransport for `envd mcp`)
// until the client disconnects or ctx ends.
func Serve(ctx context.Context, c *client.Client, version string, t sdk.Transport) error {
	return NewServer(c, version).Run(ctx, t)
}

// tool is one tool's handler: it returns the value to answer as
// structured content (a JSON object), or an error.
type tool[In any] func(ctx context.Context, in In) (any, error)

// add registers fn as tool name; its input schema is derived from In (the
// jsonschema struct tags give each field's description).
func add[In any](s *sdk.Server, name, description string, fn tool[In]) {
	sdk.AddTool(s, &sdk.Tool{Name: name, Description: description},
		func(ctx context.Context, _ *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
			out, err := fn(ctx, in)
			if err != nil {
				return errorResult(err), nil, nil
			}
			b, err := json.Marshal(out)
			if err != nil {
				return errorResult(fmt.Errorf("encode result: %w", err)), nil, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil, nil
		})
}

// errorBody is the structured content of a tool error: the API's error
// body, so an agent branches on the same codes as an API client.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Details   map[string]any `json:"details,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
}

// errorResult turns err into a tool error carrying envd's stable code: the
// server's own (*types.Error) or, for what the tool refused before calling
// the API, the code of err's kind.
func errorResult(err error) *sdk.CallToolResult {
	d := errorDetail{Code: errdefs.Code(err), Message: err.Error(), Details: errdefs.Details(err)}
	var e *types.Error
	if errors.As(err, &e) {
		d = errorDetail{Code: e.Code, Message: e.Message, Details: e.Details, RequestID: e.RequestID}
	} else if errors.Is(err, context.DeadlineExceeded) {
		d.Code = "deadline_exceeded"
	} else if d.Code == "internal" && isConnError(err) {
		d.Code = "unavailable"
	}
	b, _ := json.Marshal(errorBody{d})
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: d.Code + ": " + d.Message}},
		StructuredContent: json.RawMessage(b)}
}

// isConnError: the API could not be reached (no answer at all).
func isConnError(err error) bool {
	var ue interface{ Timeout() bool }
	return errors.As(err, &ue)
}

// codeSchemaErrors gives the code invalid_argument to the tool errors the
// SDK answers itself when arguments do not fit a tool's input schema (they
// carry only a message).
func codeSchemaErrors(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*sdk.CallToolResult)
		if err != nil || !ok || !r.IsError || r.StructuredContent != nil {
			return res, err
		}
		var msg []string
		for _, c := range r.Content {
			if t, ok := c.(*sdk.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return errorResult(fmt.Errorf("%s: %w", strings.Join(msg, "; "), errdefs.ErrInvalidArgument)), nil
	}
}

// NewClient makes a client of envd's API that authenticates with token.
type NewClient func(token string) (*client.Client, error)

// Handler returns the streamable-HTTP MCP endpoint. Each request is served
// with a client from newClient (the node's own API, on loopback) carrying
// the request's bearer token; a request without one is refused with 401
// and code unauthenticated, and one whose token the API refuses gets the
// API's status and code, before any MCP message is read.
//
// The endpoint is stateless (no Mcp-Session-Id): every request is
// authenticated on its own, so a revoked token stops working at once.
func Handler(newClient NewClient, version string) http.Handler {
	type clientKey struct{}
	mcpHandler := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		return NewServer(r.Context().Value(clientKey{}).(*client.Client), version)
	}, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := bearer(r)
		if token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="envd"`)
			writeError(w, http.StatusUnauthorized, errorDetail{Code: "unauthenticated", Message: "missing bearer token: send Authorization: Bearer <envd API token>"})
			return
		}
		c, err := newClient(token)
		if err == nil {
			err = CheckToken(r.Context(), c)
		}
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) {
				writeError(w, http.StatusBadGateway, errorDetail{Code: "unavailable", Message: "envd API: " + err.Error()})
				return
			}
			if e.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="envd", error="invalid_token"`)
			}
			writeError(w, e.Status, errorDetail{Code: e.Code, Message: e.Message, RequestID: e.RequestID})
			return
		}
		mcpHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, c)))
	})
}

// CheckToken asks the API whether c's token is good (GET /v1/info);
// `envd mcp` calls it before serving, so a bad token is a clear error at
// start rather than on every tool call.
func CheckToken(ctx context.Context, c *client.Client) error {
	_, err := c.Info(ctx)
	return err
}

// bearer is the request's bearer token, "" when it has none.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func writeError(w http.ResponseWriter, status int, d errorDetail) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{d})
}

// Mount serves h, with the MCP endpoint (Handler) at /mcp in front of it.
func Mount(h http.Handler, newClient NewClient, version string) http.Handler {
	m := Handler(newClient, version)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			m.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
