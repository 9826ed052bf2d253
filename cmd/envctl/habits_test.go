package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/errdefs"
)

// listingCore is the fakes with listings to complete from and events
// that carry data (the fakes' own lists are empty and their events bare):
// its Projects, Instances and Operations groups wrap the fakes'.
type listingCore struct {
	*apitest.Fakes
	projects  []types.Project
	instances []types.Instance
	eventData map[string]json.RawMessage // by event type
}

type listedProjects struct {
	*apitest.Projects
	c *listingCore
}

func (g listedProjects) ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error) {
	_, _ = g.Projects.ListProjects(ctx, p) // recorded
	return g.c.projects, nil
}

type listedInstances struct {
	*apitest.Instances
	c *listingCore
}

func (g listedInstances) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	_, _ = g.Instances.ListInstances(ctx, p, project)
	return g.c.instances, nil
}

type dataEvents struct {
	*apitest.Operations
	c *listingCore
}

func (g dataEvents) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	evs, err := g.Operations.OperationEvents(ctx, p, id, after)
	for i := range evs {
		evs[i].Data = g.c.eventData[evs[i].Type]
	}
	return evs, err
}

// listingServer serves a listingCore with two projects, two instances and
// two versions of every project.
func listingServer(t *testing.T, setup ...func(*apitest.Fakes)) (*listingCore, []string) {
	t.Helper()
	core := &listingCore{
		Fakes: apitest.New(),
		projects: []types.Project{
			{Name: "web", BaseImage: "debian", Current: 2, Compression: "estargz", CreatedAt: apitest.Epoch},
			{Name: "api", BaseImage: "alpine", Current: 1, Compression: "zstd", CreatedAt: apitest.Epoch,
				Excludes: []string{"/tmp", "/var/cache"}},
		},
		instances: []types.Instance{
			{ID: "web-1a2b", Project: "web", State: types.StateRunning, Version: 2, CreatedAt: apitest.Epoch},
			{ID: "api-3c4d", Project: "api", State: types.StateStopped, Version: 1, CreatedAt: apitest.Epoch},
		},
	}
	core.Versions.ListVersionsFunc = func(_ context.Context, p string) ([]types.Version, error) {
		return []types.Version{
			{Project: p, Number: 1, Kind: "base", State: "ready", CreatedAt: apitest.Epoch},
			{Project: p, Number: 2, Kind: "snapshot", State: "ready", Current: true, Message: "graphviz: yes\n# 2", CreatedAt: apitest.Epoch},
		}, nil
	}
	for _, f := range setup {
		f(core.Fakes)
	}
	parts := core.Parts()
	parts.Projects = listedProjects{core.Projects, core}
	parts.Instances = listedInstances{core.Instances, core}
	parts.Operations = dataEvents{core.Operations, core}
	h, err := api.New(parts, api.WithEventPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return core, []string{"ENVD_URL=" + srv.URL, "ENVD_TOKEN=" + apitest.Token}
}

// yamlAsJSON reads YAML with an independent parser and gives it back as
// JSON, to compare with what -o json printed.
func yamlAsJSON(t *testing.T, text string) string {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal([]byte(text), &v), text)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestOutputFormats(t *testing.T) {
	t.Parallel()
	_, env := listingServer(t, finishedSave(types.OpSucceeded, types.SaveResult{Project: "web", Version: 4, Current: true, TotalMS: 1200}, nil))
	tests := []struct {
		name     string
		args     []string
		wantName string // what -o name prints
	}{
		{"project ls", []string{"project", "ls"}, "web\napi\n"},
		{"project show", []string{"project", "show", "web"}, "web\n"},
		{"ls", []string{"ls"}, "web-1a2b\napi-3c4d\n"},
		{"show", []string{"show", "i-1"}, "i-1\n"},
		{"versions", []string{"versions", "web"}, "1\n2\n"},
		{"version show", []string{"version", "show", "web", "2"}, "2\n"},
		{"save", []string{"save", "i-1"}, "4\n"},
		{"save --no-wait", []string{"save", "i-1", "--no-wait"}, ""}, // a new operation each time
		{"op show", []string{"op", "show", "op-1"}, "op-1\n"},
		{"token ls", []string{"admin", "token", "ls"}, "1\n2\n"},
		{"image import", nil, "tiny\n"},
	}
	tarFile := filepath.Join(t.TempDir(), "rootfs.tar")
	require.NoError(t, os.WriteFile(tarFile, []byte("sixteen bytes!!\n"), 0o644))
	tests[len(tests)-1].args = []string{"image", "import", tarFile, "tiny"}
	// The tests run in order: "op show" shows the operation of the first
	// save; the operations' numbers depend on it.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "op show" {
				r := envctl(t, env, nil, "-o", "name", "op", "show", "op-1")
				require.Equal(t, 0, r.code, r.stderr)
				assert.Equal(t, tt.wantName, r.stdout)
				return
			}
			js := envctl(t, env, nil, append([]string{"-o", "json"}, tt.args...)...)
			require.Equal(t, 0, js.code, js.stderr)
			ym := envctl(t, env, nil, append([]string{"-o", "yaml"}, tt.args...)...)
			require.Equal(t, 0, ym.code, ym.stderr)
			if tt.name == "save --no-wait" {
				// Each run starts a new operation: compare the shape.
				assert.Contains(t, ym.stdout, "id: op-")
				assert.Contains(t, ym.stdout, "state: running\n")
			} else {
				var jv any
				require.NoError(t, json.Unmarshal([]byte(js.stdout), &jv))
				if tt.name == "save" { // the operation ids differ between runs
					jv.(map[string]any)["id"], jv.(map[string]any)["operation"] = nil, nil
					var yv map[string]any
					require.NoError(t, yaml.Unmarshal([]byte(ym.stdout), &yv), ym.stdout)
					yv["id"], yv["operation"] = nil, nil
					b, _ := json.Marshal(yv)
					jb, _ := json.Marshal(jv)
					assert.JSONEq(t, string(jb), string(b))
				} else {
					assert.JSONEq(t, js.stdout, yamlAsJSON(t, ym.stdout), ym.stdout)
				}
			}
			nm := envctl(t, env, nil, append([]string{"-o", "name"}, tt.args...)...)
			require.Equal(t, 0, nm.code, nm.stderr)
			if tt.name == "save --no-wait" {
				assert.Regexp(t, `^op-\d+\n$`, nm.stdout)
			} else {
				assert.Equal(t, tt.wantName, nm.stdout)
			}
		})
	}
}

func TestOutputYAMLText(t *testing.T) {
	t.Parallel()
	r := envctl(t, nil, nil, "-o", "yaml", "--version", "--url", "http://127.0.0.1:1", "--token", "x")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "client: \"0.1.0-dev\"\nurl: http://127.0.0.1:1\nserver_error: \"Get \\\"http://127.0.0.1:1/v1/info\\\": dial tcp"), r.stdout)

	_, env := listingServer(t)
	r = envctl(t, env, nil, "-o", "yaml", "project", "ls")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, `- name: web
  base_image: debian
  current_version: 2
  compression: estargz
  created_at: "2026-01-02T03:04:05Z"
  egress: ""
  isolate_instances: false
- name: api
  base_image: alpine
  current_version: 1
  excludes:
    - /tmp
    - /var/cache
  compression: zstd
  created_at: "2026-01-02T03:04:05Z"
  egress: ""
  isolate_instances: false
`, r.stdout)
}

func TestWriteYAML(t *testing.T) {
	t.Parallel()
	type inner struct {
		B []any          `json:"b"`
		M map[string]any `json:"m"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, "null\n"},
		{"empty map", map[string]any{}, "{}\n"},
		{"empty list", []string{}, "[]\n"},
		{"scalars", map[string]any{"i": 3, "f": 1.5, "t": true, "n": nil, "s": "plain text"},
			"f: 1.5\ni: 3\n\"n\": null\ns: plain text\nt: true\n"}, // n is a bool in YAML 1.1
		{"strings a reader would retype", []string{"", "true", "Yes", "off", "null", "~", "3", "1.5", "0x1f", "2026-01-02", ".inf"},
			"- \"\"\n- \"true\"\n- \"Yes\"\n- \"off\"\n- \"null\"\n- \"~\"\n- \"3\"\n- \"1.5\"\n- \"0x1f\"\n- \"2026-01-02\"\n- \".inf\"\n"},
		{"strings with indicators", []string{"a: b", "x #y", "#c", "- d", "e:", "[f]", "{g}", "*h", "&i", "!j", "|k", ">l", "'m'", "\"n\"", "%o", "@p", "`q", " r", "s "},
			"- \"a: b\"\n- \"x #y\"\n- \"#c\"\n- \"- d\"\n- \"e:\"\n- \"[f]\"\n- \"{g}\"\n- \"*h\"\n- \"&i\"\n- \"!j\"\n- \"|k\"\n- \">l\"\n- \"'m'\"\n- \"\\\"n\\\"\"\n- \"%o\"\n- \"@p\"\n- \"`q\"\n- \" r\"\n- \"s \"\n"},
		{"multi-line and control", "a\nb\tc\x01", "\"a\\nb\\tc\\x01\"\n"},
		{"plain", []string{"web-1a2b", "/var/cache", "repo/x@sha256:ab", "host:5000"}, "- web-1a2b\n- /var/cache\n- repo/x@sha256:ab\n- host:5000\n"},
		{"unicode", "größe ✓", "\"größe ✓\"\n"},
		{"nested", []any{inner{B: []any{[]any{1, 2}, map[string]any{}, []any{}}, M: map[string]any{"k": map[string]any{"x": []any{map[string]any{"y": 1, "z": "w"}}}}}},
			`- b:
    - - 1
      - 2
    - {}
    - []
  m:
    k:
      x:
        - "y": 1
          z: w
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, writeYAML(&b, tt.in))
			assert.Equal(t, tt.want, b.String())
			// An independent reader gets the same value JSON gives.
			js, err := json.Marshal(tt.in)
			require.NoError(t, err)
			assert.JSONEq(t, string(js), yamlAsJSON(t, b.String()))
		})
	}
}

func TestOutputNameRefusedWithoutIdentifier(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	for _, args := range [][]string{{"info"}, {"exec", "i-1", "--", "true"}, {"admin", "quota", "t2", "--max-instances", "1"}} {
		r := envctl(t, env, nil, append([]string{"-o", "name"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "-o name")
		assert.Empty(t, r.stdout)
	}
	_, ran := core.LastCall("Exec")
	assert.False(t, ran, "refused before the command ran")
	_, ran = core.LastCall("SetQuota")
	assert.False(t, ran, "refused before the command ran")
}

func TestExitCodesByKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind error
		want int
	}{
		{"not found", errdefs.ErrNotFound, 4},
		{"conflict", errdefs.ErrConflict, 3},
		{"quota exceeded", errdefs.ErrQuotaExceeded, 5},
		{"unavailable", errdefs.ErrUnavailable, 6},
		{"failed precondition", errdefs.ErrFailedPrecondition, 1},
		{"already exists", errdefs.ErrAlreadyExists, 1},
		{"permission denied", errdefs.ErrPermissionDenied, 1},
		{"invalid argument", errdefs.ErrInvalidArgument, 1},
		{"internal", fmt.Errorf("disk on fire"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, env := server(t, func(core *apitest.Fakes) {
				core.Instances.GetInstanceFunc = func(_ context.Context, id string) (types.Instance, error) {
					return types.Instance{}, fmt.Errorf("instance %q: %w", id, tt.kind)
				}
			})
			r := envctl(t, env, nil, "show", "i-1")
			assert.Equal(t, tt.want, r.code, r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "envctl: instance \"i-1\": "), r.stderr)
		})
	}
	t.Run("server unreachable", func(t *testing.T) {
		t.Parallel()
		r := envctl(t, []string{"ENVD_URL=http://127.0.0.1:1", "ENVD_TOKEN=x"}, nil, "ls")
		assert.Equal(t, 6, r.code, r.stderr)
	})
	t.Run("lost switch", func(t *testing.T) {
		t.Parallel()
		_, env := server(t, func(core *apitest.Fakes) {
			core.Versions.SetCurrentFunc = func(_ context.Context, p string, _ types.SetCurrentRequest) (types.Project, error) {
				return types.Project{}, fmt.Errorf("project %q: current is 3, not 1: %w", p, errdefs.ErrConflict)
			}
		})
		r := envctl(t, env, nil, "switch", "web", "2", "--expected", "1")
		assert.Equal(t, 3, r.code, r.stderr)
	})
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		r := envctl(t, nil, nil, "show")
		assert.Equal(t, 2, r.code, r.stderr)
	})
}

// jsonError parses the last line of stderr as {"error": ...}.
func jsonError(t *testing.T, stderr string) errorDetail {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	var body struct {
		Error errorDetail `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(lines[len(lines)-1]))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), stderr)
	return body.Error
}

func TestErrorsAsJSON(t *testing.T) {
	t.Parallel()
	_, env := server(t, func(core *apitest.Fakes) {
		core.Instances.GetInstanceFunc = func(_ context.Context, id string) (types.Instance, error) {
			return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound), map[string]any{"instance": id})
		}
	}, finishedSave(types.OpFailed, types.SaveResult{}, &types.OpError{Code: "unavailable", Message: "registry down"}))

	r := envctl(t, env, nil, "-o", "json", "show", "i-9")
	assert.Equal(t, 4, r.code)
	assert.Empty(t, r.stdout)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
	assert.Equal(t, errorDetail{Code: "not_found", Message: `instance "i-9": not found`,
		Details: map[string]any{"instance": "i-9"}, Status: 404}, jsonError(t, r.stderr))

	// Human text otherwise, -o yaml included.
	for _, o := range []string{"table", "yaml"} {
		r = envctl(t, env, nil, "-o", o, "show", "i-9")
		assert.Equal(t, 4, r.code)
		assert.Equal(t, "envctl: instance \"i-9\": not found (not_found, instance: i-9)\n", r.stderr)
	}

	r = envctl(t, env, nil, "-o", "json", "show")
	assert.Equal(t, 2, r.code)
	e := jsonError(t, r.stderr)
	assert.Equal(t, "usage", e.Code)
	assert.Contains(t, e.Message, "want 1 argument(s), got 0")

	// A failed operation: its code, after the progress lines.
	r = envctl(t, env, nil, "-o", "json", "save", "i-1")
	assert.Equal(t, 1, r.code)
	assert.True(t, strings.HasPrefix(r.stderr, "freeze: froze the instance\n"), r.stderr)
	e = jsonError(t, r.stderr)
	assert.Equal(t, "unavailable", e.Code)
	assert.Equal(t, "save op-1 failed: registry down (unavailable)", e.Message)
	assert.Equal(t, map[string]any{"operation": "op-1", "state": "failed"}, e.Details)

	r = envctl(t, []string{"ENVD_URL=http://127.0.0.1:1", "ENVD_TOKEN=x"}, nil, "-o", "json", "ls")
	assert.Equal(t, 6, r.code)
	assert.Equal(t, "unavailable", jsonError(t, r.stderr).Code)
}

// completions runs envctl __complete and returns the candidates and the
// directive line.
func completions(t *testing.T, env []string, args ...string) ([]string, string) {
	t.Helper()
	r := envctl(t, env, nil, append([]string{"__complete"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	core, env := listingServer(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"projects", []string{"project", "show", ""}, []string{"web\tbase debian, current version 2", "api\tbase alpine, current version 1"}},
		{"projects by prefix", []string{"versions", "w"}, []string{"web\tbase debian, current version 2"}},
		{"instances", []string{"stop", ""}, []string{"web-1a2b\tRunning, web version 2", "api-3c4d\tStopped, api version 1"}},
		{"versions", []string{"switch", "web", ""}, []string{"1\tbase, ready", "2\tsnapshot, ready, current: graphviz: yes # 2"}},
		{"version flag", []string{"up", "web", "--version", "2"}, []string{"2\tsnapshot, ready, current: graphviz: yes # 2"}},
		{"nothing past the arguments", []string{"show", "web-1a2b", ""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, directive := completions(t, env, tt.args...)
			if tt.want == nil {
				assert.Empty(t, got)
			} else {
				assert.Equal(t, tt.want, got)
			}
			assert.Equal(t, ":4", directive, "no file names")
		})
	}
	call, ok := core.LastCall("ListVersions")
	require.True(t, ok)
	assert.Equal(t, []any{"web"}, call.Args, "versions of the project argument")

	// exec's command line completes file names past the instance.
	_, directive := completions(t, env, "exec", "web-1a2b", "--", "")
	assert.Equal(t, ":0", directive)

	// A refused token or no server: nothing, quietly.
	for _, bad := range [][]string{
		{"ENVD_URL=" + strings.TrimPrefix(env[0], "ENVD_URL="), "ENVD_TOKEN=wrong"},
		{"ENVD_URL=http://127.0.0.1:1", "ENVD_TOKEN=x"},
	} {
		got, directive := completions(t, bad, "project", "show", "")
		assert.Empty(t, got)
		assert.Equal(t, ":4", directive)
	}

	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := envctl(t, nil, nil, "completion", shell)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "__complete", shell)
	}
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	_, env := server(t)
	url := strings.TrimPrefix(env[0], "ENVD_URL=")
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := envctl(t, env, nil, args...)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, []string{"CLIENT:", "0.1.0-dev"}, strings.Fields(strings.Split(r.stdout, "\n")[0]))
		assert.Equal(t, []string{"SERVER:", "test", "at", url}, strings.Fields(strings.Split(r.stdout, "\n")[1]))
	}
	r := envctl(t, env, nil, "-o", "json", "--version")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `{"client": "0.1.0-dev", "server": "test", "url": "`+url+`"}`, r.stdout)

	r = envctl(t, []string{"ENVD_URL=http://127.0.0.1:1", "ENVD_TOKEN=x"}, nil, "--version")
	assert.Equal(t, 0, r.code, "the client's version does not need a server")
	assert.Contains(t, r.stdout, "0.1.0-dev")
	assert.Equal(t, []string{"SERVER:", "unknown:", "Get"}, strings.Fields(strings.Split(r.stdout, "\n")[1])[:3])

	// "version show" still shows a project's version.
	r = envctl(t, env, nil, "-o", "name", "version", "show", "web", "3")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "3\n", r.stdout)
}

func TestHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	r := envctl(t, nil, nil, "--help")
	require.Equal(t, 0, r.code, r.stderr)
	for _, line := range []string{"  3  conflict", "  4  not found", "  5  quota exceeded", "  6  unavailable", "yaml", "completion bash"} {
		assert.Contains(t, r.stdout, line)
	}
}

func TestProgressOnAPipe(t *testing.T) {
	t.Parallel()
	core, env := listingServer(t, func(core *apitest.Fakes) {
		core.Versions.SaveFunc = func(_ context.Context, id string, _ types.SaveRequest, _ string) (types.Operation, error) {
			op := core.Operations.NewOperation("save", id)
			core.Operations.AppendEvent(op.ID, "spooled", "read 3 entries (2048 bytes) while frozen for 2ms")
			core.Operations.AppendEvent(op.ID, "encoded", "estargz layer of 1536 bytes in 1ms")
			core.Operations.AppendEvent(op.ID, "pushed", "pushed and verified x in 1ms")
			go func() {
				time.Sleep(20 * time.Millisecond)
				core.Operations.Finish(op.ID, types.OpSucceeded, types.SaveResult{Project: "web", Version: 4, Current: true}, nil)
			}()
			return op, nil
		}
	})
	core.eventData = map[string]json.RawMessage{
		"spooled": json.RawMessage(`{"entries": 3, "bytes": 2048, "whiteouts": 0, "freeze_ms": 2}`),
		"encoded": json.RawMessage(`{"layer_bytes": 1536, "encode_ms": 1}`),
		"pushed":  json.RawMessage(`{"image": "x", "push_ms": 1}`),
	}
	r := envctl(t, env, nil, "-o", "yaml", "save", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "spooled: read 3 entries (2048 bytes) while frozen for 2ms [2.0 KiB]\n"+
		"encoded: estargz layer of 1536 bytes in 1ms [1.5 KiB]\n"+
		"pushed: pushed and verified x in 1ms [1.5 KiB]\n", r.stderr, "pushed: the encoded layer's size")
	assert.Contains(t, r.stdout, "version: 4\n")
	assert.NotContains(t, r.stdout, "spooled")

	f := filepath.Join(t.TempDir(), "rootfs.tar")
	require.NoError(t, os.WriteFile(f, bytes.Repeat([]byte("x"), 3000), 0o644))
	r = envctl(t, env, nil, "-o", "name", "image", "import", f, "tiny")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "tiny\n", r.stdout, "progress never in the output")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, r.stderr)
	assert.Equal(t, "upload: sending "+f+" (2.9 KiB)", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "upload: sent 2.9 KiB in "), lines[1])

	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello"), []byte("hi\n"), 0o644))
	r = envctl(t, env, nil, "image", "import", root, "dir")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "upload: sending "+root+" (size unknown)\nupload: sent ")
}

func TestProgressOnATerminal(t *testing.T) {
	t.Parallel()
	_, env := server(t)
	master, tty := openPTY(t)
	f := filepath.Join(t.TempDir(), "rootfs.tar")
	require.NoError(t, os.WriteFile(f, bytes.Repeat([]byte("x"), 3000), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, envctlBin, "-o", "json", "image", "import", f, "tiny")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	require.NoError(t, cmd.Run())
	tty.Close()
	assert.Contains(t, out.String(), `"name": "tiny"`)
	assert.NotContains(t, out.String(), "upload")

	require.NoError(t, master.SetReadDeadline(time.Now().Add(5*time.Second)))
	var screen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(screen.String(), "100%\r\x1b[K") {
		n, err := master.Read(buf)
		screen.Write(buf[:n])
		if err != nil { // EIO once envctl's side is closed
			break
		}
	}
	assert.Contains(t, screen.String(), "\r\x1b[Kupload [")
	assert.Contains(t, screen.String(), "] 2.9 KiB / 2.9 KiB 100%\r\x1b[K", "the bar ends full, then the line is cleared")
}

// A server that reports a transfer in steps (bytes of total_bytes) gets a
// bar on a terminal and sizes on a pipe.
func TestProgressOfSizedEvents(t *testing.T) {
	t.Parallel()
	ev := types.Event{Seq: 1, Type: "fetch", Message: "lazy fetch of version 3",
		Data: json.RawMessage(`{"bytes": 512, "total_bytes": 2048}`)}
	tests := []struct {
		name string
		tty  bool
		want string
	}{
		{"terminal", true, "\r\x1b[Kfetch [======                  ] 512 B / 2.0 KiB  25%: lazy fetch of version 3\r\x1b[K"},
		{"pipe", false, "fetch: lazy fetch of version 3 [512 B of 2.0 KiB]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &progress{w: &b, tty: tt.tty}
			p.event(ev)
			p.done()
			assert.Equal(t, tt.want, b.String())
		})
	}
}

func TestProgressFitsTheTerminal(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := &progress{w: &b, tty: true, width: 20}
	p.event(types.Event{Seq: 1, Type: "spooled", Message: "read 3 entries (2048 bytes) while frozen for 2ms"})
	assert.Equal(t, "\r\x1b[Kspooled: read 3 ent", b.String(), "19 columns: a full line would wrap")
}

// A bare noun lists, as `kubectl get nodes` does: each noun with an ls
// verb that needs no argument prints what its ls prints, in every output
// format; a noun whose ls needs an argument is a usage error that names it.
func TestBareNounLists(t *testing.T) {
	t.Parallel()
	_, env := listingServer(t)
	for _, noun := range [][]string{
		{"nodes"},
		{"project"},
		{"image"},
		{"token"},
		{"ssh-key"},
		{"admin", "token"},
		{"admin", "rollout"},
	} {
		name := strings.Join(noun, " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, out := range []string{"table", "json"} {
				ls := envctl(t, env, nil, append([]string{"-o", out}, append(noun, "ls")...)...)
				require.Equal(t, 0, ls.code, ls.stderr)
				require.NotEmpty(t, ls.stdout, "%s ls prints something", name)
				bare := envctl(t, env, nil, append([]string{"-o", out}, noun...)...)
				assert.Equal(t, 0, bare.code, "envctl %s: %s", name, bare.stderr)
				assert.Equal(t, ls.stdout, bare.stdout, "envctl %s -o %s lists as %s ls does", name, out, name)
			}
		})
	}

	r := envctl(t, env, nil, "volume")
	assert.Equal(t, 2, r.code, "a usage error")
	assert.Contains(t, r.stderr, "to list: envctl volume ls PROJECT")
	r = envctl(t, env, nil, "op")
	assert.Equal(t, 2, r.code, "a noun without ls stays a usage error")
	assert.Contains(t, r.stderr, "missing subcommand")
	// The older form still creates; flags of a create without a tenant
	// are refused rather than ignored by a listing.
	r = envctl(t, env, nil, "admin", "token", "--admin")
	assert.Equal(t, 2, r.code, r.stdout)
	assert.Contains(t, r.stderr, "need the TENANT")
}
