package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apispec"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/execproto"
	"github.com/envd-dev/envd/api/types"
)

// specPath is docs/openapi.yaml, the API's contract.
const specPath = "../docs/openapi.yaml"

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// TestOpenAPISpecCoversEveryRoute fails when a route of the router is
// missing from docs/openapi.yaml, or a path and method of the spec has no
// route; loading the spec also validates it as an OpenAPI 3.1 document.
func TestOpenAPISpecCoversEveryRoute(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err, "docs/openapi.yaml is not a valid OpenAPI document")
	require.Equal(t, "3.1.0", doc.OpenAPI)

	h, err := api.New(apitest.New().Parts())
	require.NoError(t, err)
	engine, ok := h.(*gin.Engine)
	require.True(t, ok, "api.New returns %T, not a *gin.Engine: list its routes another way", h)
	var router, catchAll []string
	for _, r := range engine.Routes() {
		router = append(router, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
		if i := strings.Index(r.Path, "/*"); i >= 0 { // it also serves the spec's paths below it
			catchAll = append(catchAll, r.Method+" "+ginParam.ReplaceAllString(r.Path[:i+1], "{$1}"))
		}
	}
	// Served in front of the router (envd/node's handler chain), not by
	// it: api/mcp.Mount. Documented all the same.
	mounted := []string{"POST /mcp"}
	var spec []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec = append(spec, method+" "+path)
		}
	}
	slices.Sort(router)
	slices.Sort(spec)
	require.NotEmpty(t, router)

	var missing, extra []string
	for _, r := range router {
		if !slices.Contains(spec, r) {
			missing = append(missing, r)
		}
	}
	for _, s := range spec {
		below := slices.ContainsFunc(catchAll, func(prefix string) bool { return strings.HasPrefix(s, prefix) })
		if !slices.Contains(router, s) && !below && !slices.Contains(mounted, s) {
			extra = append(extra, s)
		}
	}
	assert.Empty(t, missing, "routes of the router missing from docs/openapi.yaml")
	assert.Empty(t, extra, "paths of docs/openapi.yaml that the router does not serve")
}

// The validator sees the API's real handlers (gin, the SSE writer, the
// WebSocket hijack) through its recorder, and the fake core's answers
// match the spec's schemas.
func TestOpenAPIValidatorOnTheRouter(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err)
	v, err := apispec.NewValidator(doc)
	require.NoError(t, err)
	core := apitest.New()
	h, err := api.New(core.Parts(), api.WithEventPollInterval(10*time.Millisecond))
	require.NoError(t, err)
	srv := httptest.NewServer(v.Wrap(h))
	t.Cleanup(srv.Close)

	do := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	status, _ := do("GET", "/healthz", "")
	assert.Equal(t, 200, status)
	status, _ = do("POST", "/v1/projects", `{"name":"web","base":"busybox"}`, "Idempotency-Key", "k1")
	assert.Equal(t, 201, status)
	status, _ = do("POST", "/v1/projects/web/instances", `{"ttl":"1h"}`, "Prefer", "respond-async")
	assert.Equal(t, 202, status)
	status, _ = do("POST", "/v1/instances/i-1/exec", `{"args":["true"]}`)
	assert.Equal(t, 200, status)
	// Refused bad input is not a violation.
	status, _ = do("POST", "/v1/projects", `{"name":"web","bogus":1}`)
	assert.Equal(t, 400, status)
	status, _ = do("GET", "/v1/nowhere", "")
	assert.Equal(t, 404, status)

	op := core.Operations.NewOperation(types.OpKindSave, "i-1")
	core.Operations.AppendEvent(op.ID, "spooled", "read 3 entries")
	core.Operations.Finish(op.ID, types.OpSucceeded, types.SaveResult{Project: "web", Version: 2, Current: true, Image: "envd/t/web@sha256:1"}, nil)
	status, body := do("GET", "/v1/operations/"+op.ID+"/events", "", "Accept", "text/event-stream")
	assert.Equal(t, 200, status)
	assert.Contains(t, body, "event: end")
	status, _ = do("GET", "/v1/operations/"+op.ID+"/events?wait=false", "")
	assert.Equal(t, 200, status)

	ws, resp, err := dialExec(t, srv, "cmd=cat", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	ws.send(execproto.Stdin, "hi")
	ws.send(execproto.EOF, "")
	out, exit, _ := ws.readUntilExit()
	assert.Equal(t, "hi", out[execproto.Stdout])
	assert.Equal(t, 0, exit.ExitCode)
	ws.conn.CloseNow()

	var report strings.Builder
	assert.False(t, v.Report(&report), "violations:\n%s", report.String())
	assert.Equal(t, 9, v.Checked())
}

// The validator reads the router's JSON answers: a spec that asks more of
// a project than the server answers is reported.
func TestOpenAPIValidatorReportsADrift(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err)
	project := doc.Components.Schemas["Project"].Value
	project.Required = append(project.Required, "no_such_field")
	v, err := apispec.NewValidator(doc)
	require.NoError(t, err)
	h, err := api.New(apitest.New().Parts())
	require.NoError(t, err)
	srv := httptest.NewServer(v.Wrap(h))
	t.Cleanup(srv.Close)

	req, err := http.NewRequest("GET", srv.URL+"/v1/projects/web", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	got, _ := v.Violations()
	require.Len(t, got, 1)
	assert.Equal(t, "/v1/projects/web", got[0].Path)
	assert.Contains(t, got[0].Err, "no_such_field")
}

// The spec's schemas are the wire types: the same property names (the JSON
// tags), and in answers every field that is always sent (no omitempty)
// required.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err)
	answers := map[string]any{
		"Principal": types.Principal{}, "Info": types.Info{}, "Image": types.Image{}, "Project": types.Project{},
		"Retention": types.Retention{}, "GCResult": types.GCResult{}, "GCVersion": types.GCVersion{},
		"Volume": types.Volume{}, "VolumeArchive": types.VolumeArchive{}, "Version": types.Version{},
		"Instance": types.Instance{}, "Protection": types.Protection{}, "ExecResult": types.ExecResult{},
		"SaveResult": types.SaveResult{}, "Operation": types.Operation{}, "OpError": types.OpError{},
		"Event": types.Event{}, "TermSize": types.TermSize{}, "Quota": types.Quota{}, "Usage": types.Usage{},
		"Token": types.Token{}, "BuildResult": types.BuildResult{}, "MigrateResult": types.MigrateResult{},
		"Limits": types.Limits{}, "TokenInfo": types.TokenInfo{}, "ErrorBody": types.ErrorBody{},
		"ErrorDetail": types.ErrorDetail{}, "ExecExit": types.ExecExit{},
		"Readiness": types.Readiness{}, "Check": types.Check{},
		"Changes": types.Changes{}, "PackageChanges": types.PackageChanges{}, "Package": types.Package{},
		"PackageUpgrade": types.PackageUpgrade{}, "FileChange": types.FileChange{}, "FileState": types.FileState{},
		"DirSummary": types.DirSummary{}, "DirBytes": types.DirBytes{}, "ChangeTotals": types.ChangeTotals{},
		"ExcludedPath": types.ExcludedPath{}, "ForkResult": types.ForkResult{},
		"SSHKey": types.SSHKey{}, "SSHInfo": types.SSHInfo{},
		"ListeningPort": types.ListeningPort{}, "PortList": types.PortList{}, "PreviewToken": types.PreviewToken{},
		"ProjectPorts": types.ProjectPorts{},
		"FileInfo":     types.FileInfo{}, "FileList": types.FileList{}, "FileArchiveResult": types.FileArchiveResult{},
		"FileEvent": types.FileEvent{},
		"Rollout":   types.Rollout{}, "RolloutProject": types.RolloutProject{}, "RolloutFailure": types.RolloutFailure{},
		"Checkpoint": types.Checkpoint{}, "CheckpointVolume": types.CheckpointVolume{}, "CheckpointResult": types.CheckpointResult{},
		"GCCheckpoint": types.GCCheckpoint{},
	}
	requests := map[string]any{
		"CreateProjectRequest": types.CreateProjectRequest{}, "AddVolumeRequest": types.AddVolumeRequest{},
		"VolumeArchiveRequest": types.VolumeArchiveRequest{}, "SetCurrentRequest": types.SetCurrentRequest{},
		"CreateInstanceRequest": types.CreateInstanceRequest{}, "ExecRequest": types.ExecRequest{},
		"SaveRequest": types.SaveRequest{}, "RenewRequest": types.RenewRequest{}, "GCRequest": types.GCRequest{},
		"CreateTokenRequest": types.CreateTokenRequest{}, "BuildRequest": types.BuildRequest{},
		"MigrateRequest": types.MigrateRequest{}, "ProjectNetwork": types.ProjectNetwork{},
		"ForkRequest":         types.ForkRequest{},
		"AddSSHKeyRequest":    types.AddSSHKeyRequest{},
		"PreviewTokenRequest": types.PreviewTokenRequest{},
		"FileMkdirRequest":    types.FileMkdirRequest{}, "FileMoveRequest": types.FileMoveRequest{},
		"CreateRolloutRequest": types.CreateRolloutRequest{}, "ProjectValidation": types.ProjectValidation{},
		"CheckpointRequest": types.CheckpointRequest{},
	}
	check := func(name string, v any, answer bool) {
		t.Run(name, func(t *testing.T) {
			ref := doc.Components.Schemas[name]
			require.NotNil(t, ref, "no schema %s in components", name)
			var props, always []string
			rt := reflect.TypeOf(v)
			for i := range rt.NumField() {
				tag := rt.Field(i).Tag.Get("json")
				jsonName, opts, _ := strings.Cut(tag, ",")
				if jsonName == "" || jsonName == "-" {
					continue
				}
				props = append(props, jsonName)
				if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
					always = append(always, jsonName)
				}
			}
			var specProps []string
			for p := range ref.Value.Properties {
				specProps = append(specProps, p)
			}
			assert.ElementsMatch(t, props, specProps, "properties of %s", name)
			if answer {
				assert.ElementsMatch(t, always, ref.Value.Required, "required properties of %s", name)
			}
		})
	}
	for name, v := range answers {
		check(name, v, true)
	}
	for name, v := range requests {
		check(name, v, false)
	}
}
