package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/errdefs"
)

// envctlBin is the envctl binary built for the tests.
var envctlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "envctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	envctlBin = filepath.Join(dir, "envctl")
	build := exec.Command("go", "build", "-o", envctlBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build envctl:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// envctl runs the binary with only the given environment (plus PATH and
// HOME) and stdin.
func envctl(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, envctlBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, out.String(), errb.String()}
}

// server starts the API on a fake core, configured by setup first, and
// returns the environment that points envctl at it.
func server(t *testing.T, setup ...func(*apitest.Fakes)) (*apitest.Fakes, []string) {
	t.Helper()
	core := apitest.New()
	for _, f := range setup {
		f(core)
	}
	h, err := api.New(core.Parts(), api.WithEventPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return core, []string{"ENVD_URL=" + srv.URL, "ENVD_TOKEN=" + apitest.Token}
}

func TestUp(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "-o", "json", "up", "web", "--version", "3", "--ttl", "2h", "--retain")
	require.Equal(t, 0, r.code, r.stderr)
	var inst map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &inst), r.stdout)
	assert.Equal(t, "i-1", inst["id"])
	assert.Equal(t, "Running", inst["state"])
	assert.Equal(t, float64(3), inst["version"])
	call, _ := core.LastCall("CreateInstance")
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{Version: 3, TTL: "2h", Retain: true}, ""}, call.Args)

	r = envctl(t, env, nil, "up", "web")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, []string{"ID", "STATE", "VERSION"}, strings.Fields(lines[0])[:3])
	assert.Equal(t, []string{"i-1", "Running", "1"}, strings.Fields(lines[1])[:3])
}

func TestExecPassesExitCodeThrough(t *testing.T) {
	t.Parallel()
	core, env := server(t, func(core *apitest.Fakes) {
		core.Exec.ExecFunc = func(_ context.Context, id string, req types.ExecRequest) (types.ExecResult, error) {
			if req.Args[0] == "true" {
				return types.ExecResult{}, nil
			}
			return types.ExecResult{ExitCode: 7, Stdout: "out:" + req.Stdin, Stderr: "err\n"}, nil
		}
	})
	r := envctl(t, env, strings.NewReader("piped"), "exec", "i-1", "--env", "A=1", "--cwd", "/w", "--", "sh", "-c", "exit 7")
	assert.Equal(t, 7, r.code)
	assert.Equal(t, "out:piped", r.stdout)
	assert.Equal(t, "err\n", r.stderr)
	call, _ := core.LastCall("Exec")
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"sh", "-c", "exit 7"}, Env: []string{"A=1"}, Cwd: "/w", Stdin: "piped"}}, call.Args)

	r = envctl(t, env, nil, "exec", "i-1", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
}

// finishedSave makes Save return an operation that has events and
// finishes shortly.
func finishedSave(state types.OpState, res types.SaveResult, opErr *types.OpError) func(*apitest.Fakes) {
	return func(core *apitest.Fakes) { saveFunc(core, state, res, opErr) }
}

func saveFunc(core *apitest.Fakes, state types.OpState, res types.SaveResult, opErr *types.OpError) {
	core.Versions.SaveFunc = func(_ context.Context, id string, _ types.SaveRequest, _ string) (types.Operation, error) {
		op := core.Operations.NewOperation("save", id)
		core.Operations.AppendEvent(op.ID, "freeze", "froze the instance")
		core.Operations.AppendEvent(op.ID, "push", "pushed the layer")
		go func() {
			time.Sleep(20 * time.Millisecond)
			if state == types.OpSucceeded {
				core.Operations.Finish(op.ID, state, res, nil)
			} else {
				core.Operations.Finish(op.ID, state, nil, opErr)
			}
		}()
		return op, nil
	}
}

func TestSave(t *testing.T) {
	t.Parallel()
	core, env := server(t, finishedSave(types.OpSucceeded, types.SaveResult{Project: "web", Version: 4, Current: true, TotalMS: 1200}, nil))

	r := envctl(t, env, nil, "-o", "json", "save", "i-1", "-m", "graphviz", "--expected", "3", "--idempotency-key", "k1")
	require.Equal(t, 0, r.code, r.stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Equal(t, float64(4), out["version"])
	assert.Equal(t, "succeeded", out["state"])
	assert.Equal(t, true, out["current"])
	assert.Equal(t, false, out["conflict"])
	assert.Equal(t, "op-1", out["id"])
	assert.Equal(t, "op-1", out["operation"].(map[string]any)["id"])
	assert.Contains(t, r.stderr, "freeze: froze the instance\npush: pushed the layer\n")
	three := 3
	call, _ := core.LastCall("Save")
	assert.Equal(t, []any{"i-1", types.SaveRequest{Message: "graphviz", ExpectedCurrent: &three}, "k1"}, call.Args)

	r = envctl(t, env, nil, "save", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "saved version 4 of web (current)\n")
	assert.Contains(t, r.stdout, "total 1.2s")
}

func TestSaveConflictExitsThree(t *testing.T) {
	t.Parallel()
	_, env := server(t, finishedSave(types.OpSucceeded, types.SaveResult{Project: "web", Version: 4, Conflict: true, Expected: 2}, nil),
		func(core *apitest.Fakes) {
			core.Projects.GetProjectFunc = func(_ context.Context, name string) (types.Project, error) {
				return types.Project{Name: name, Current: 5}, nil
			}
		})
	r := envctl(t, env, nil, "save", "i-1")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stdout, "saved version 4 of web (NOT current: conflict, current is 5)")

	r = envctl(t, env, nil, "-o", "json", "save", "i-1")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"conflict": true`)
}

func TestSaveFailureExitsOne(t *testing.T) {
	t.Parallel()
	_, env := server(t, finishedSave(types.OpFailed, types.SaveResult{}, &types.OpError{Code: "unavailable", Message: "registry down"}))
	r := envctl(t, env, nil, "save", "i-1")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "envctl: save op-1 failed: registry down (unavailable)")
}

func TestSaveNoWait(t *testing.T) {
	t.Parallel()
	_, env := server(t)
	r := envctl(t, env, nil, "-o", "json", "save", "i-1", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	var op types.Operation
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &op))
	assert.Equal(t, "op-1", op.ID)
	assert.Equal(t, types.OpRunning, op.State)
}

func TestUpNoWaitIsARestoreOperation(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "-o", "json", "up", "web", "--version", "2", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	var op types.Operation
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &op))
	assert.Equal(t, types.OpKindRestore, op.Kind)
	call, ok := core.LastCall("Restore")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{Version: 2}, ""}, call.Args)
}

func TestRetentionAndGC(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "project", "retention", "web", "--keep-last", "3", "--keep-newer-than", "720h")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "the newest 3 and those newer than 720h")
	call, ok := core.LastCall("SetRetention")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.Retention{KeepLast: 3, KeepNewerThan: "720h"}}, call.Args)

	core.Node.GCFunc = func(_ context.Context, req types.GCRequest, _ string) (types.Operation, error) {
		op := core.Operations.NewOperation("gc", "registry")
		go func() {
			time.Sleep(20 * time.Millisecond)
			core.Operations.Finish(op.ID, types.OpSucceeded, types.GCResult{DryRun: req.DryRun,
				Versions: []types.GCVersion{{Tenant: "t1", Project: "web", Version: 2, SizeBytes: 2 << 20}},
				Swept:    true, BlobsBefore: 9, BlobsAfter: 4, BytesBefore: 10 << 20, BytesAfter: 8 << 20}, nil)
		}()
		return op, nil
	}
	r = envctl(t, env, nil, "gc")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "web")
	assert.Contains(t, r.stdout, "registry: 9 -> 4 blobs")
	call, _ = core.LastCall("GC")
	assert.Equal(t, types.GCRequest{}, call.Args[0])

	r = envctl(t, env, nil, "-o", "json", "gc", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	var res types.GCResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.True(t, res.DryRun)
	assert.Len(t, res.Versions, 1)
}

func TestAdminQuotaAndUsage(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "admin", "quota", "t2", "--max-instances", "3", "--max-stored", "2G", "--max-ttl", "8h")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("SetQuota")
	require.True(t, ok)
	assert.Equal(t, []any{"t2", types.Quota{MaxInstances: 3, MaxStoredBytes: 2 << 30, MaxTTL: "8h"}}, call.Args)
	assert.Contains(t, r.stdout, "no limit", "max versions was not given")

	r = envctl(t, env, nil, "admin", "quota", "t2", "--max-stored", "lots")
	assert.Equal(t, 2, r.code, "a bad size is a usage error")

	r = envctl(t, env, nil, "admin", "token", "t2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "tok-t2", strings.TrimSpace(r.stdout))

	r = envctl(t, env, nil, "usage")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "TENANT:")
}

func TestBuildRequests(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "-o", "json", "build", "web", "--apt", "tree", "--apt", "jq=1.6-2.1", "--validate", "tree --version", "--switch", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("Build")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.BuildRequest{Manager: "apt", Packages: []string{"tree", "jq=1.6-2.1"},
		Validate: [][]string{{"tree", "--version"}}, Switch: true}, ""}, call.Args)

	spec := `{"manager": "apk", "packages": ["graphviz"], "validate": [["dot", "-V"]]}`
	r = envctl(t, env, strings.NewReader(spec), "build", "web", "-f", "-", "--from", "2", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("Build")
	assert.Equal(t, types.BuildRequest{Manager: "apk", Packages: []string{"graphviz"}, Validate: [][]string{{"dot", "-V"}}, From: 2}, call.Args[1])

	r = envctl(t, env, strings.NewReader(`{"manager": "apt", "pkgs": []}`), "build", "web", "-f", "-")
	assert.Equal(t, 2, r.code, "an unknown field in the spec is a usage error")
	r = envctl(t, env, nil, "build", "web")
	assert.Equal(t, 2, r.code, "no packages")
	r = envctl(t, env, nil, "build", "web", "--apt", "a", "--apk", "b")
	assert.Equal(t, 2, r.code, "two managers")
}

func TestMigrateRequest(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "migrate", "web", "--base", "debian-13", "--validate", "dot -V", "--switch", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("Migrate")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.MigrateRequest{Base: "debian-13", Validate: [][]string{{"dot", "-V"}}, Switch: true}, ""}, call.Args)
	r = envctl(t, env, nil, "migrate", "web")
	assert.Equal(t, 2, r.code, "--base is required")
}

func TestNotFoundPrintsCode(t *testing.T) {
	t.Parallel()
	_, env := server(t, func(core *apitest.Fakes) {
		core.Instances.GetInstanceFunc = func(_ context.Context, id string) (types.Instance, error) {
			return types.Instance{}, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
		}
	})
	r := envctl(t, env, nil, "show", "i-missing")
	assert.Equal(t, 4, r.code, "not found exits 4")
	assert.Equal(t, "envctl: instance \"i-missing\": not found (not_found)\n", r.stderr)
	assert.Empty(t, r.stdout)
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	_, env := server(t)
	for _, args := range [][]string{
		{"up"},
		{"bogus"},
		{"exec", "i-1"},
		{"switch", "web", "two"},
		{"-o", "xml", "ls"},
		{"ls", "--nope"},
		{"project", "create", "web"}, // --base is required
	} {
		r := envctl(t, env, nil, args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "envctl: "), r.stderr)
	}
}

func TestServerFromDataDir(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	dir := t.TempDir()
	url := strings.TrimPrefix(env[0], "ENVD_URL=")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "envd.url"), []byte(url+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "admin.token"), []byte(apitest.Token+"\n"), 0o600))

	r := envctl(t, []string{"ENVD_DATA_DIR=" + dir}, nil, "-o", "json", "info")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"node": "node-1"`)

	r = envctl(t, nil, nil, "--data-dir", dir, "info")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "REGISTRY:")
	_, ok := core.LastCall("Info")
	assert.True(t, ok)

	r = envctl(t, nil, nil, "--data-dir", t.TempDir(), "info")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no envd server")
}

func TestImageImportDirectory(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "hello"), []byte("#!/bin/sh\necho hi\n"), 0o755))

	r := envctl(t, env, nil, "-o", "json", "image", "import", root, "tiny")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"name": "tiny"`)

	call, ok := core.LastCall("ImportImage")
	require.True(t, ok)
	tr := tar.NewReader(bytes.NewReader(call.Args[1].([]byte)))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	assert.Contains(t, names, "./bin/hello")

	// A file is sent as it is.
	f := filepath.Join(t.TempDir(), "rootfs.tar")
	require.NoError(t, os.WriteFile(f, []byte("not really a tar"), 0o644))
	r = envctl(t, env, nil, "image", "import", f, "raw")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("ImportImage")
	assert.Equal(t, []any{"raw", []byte("not really a tar")}, call.Args)
}

func TestVersionsTable(t *testing.T) {
	t.Parallel()
	core, env := server(t, func(core *apitest.Fakes) {
		core.Versions.ListVersionsFunc = func(_ context.Context, p string) ([]types.Version, error) {
			return []types.Version{
				{Project: p, Number: 1, Kind: "base", State: "ready", SizeBytes: 2 << 20, CreatedAt: apitest.Epoch},
				{Project: p, Number: 2, Kind: "snapshot", State: "ready", Current: true, Pinned: true, Message: "graphviz", CreatedAt: apitest.Epoch},
			}, nil
		}
	})
	r := envctl(t, env, nil, "versions", "web")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, []string{"VERSION", "KIND", "STATE", "CURRENT", "PINNED", "SIZE", "CREATED", "MESSAGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"1", "base", "ready", "no", "no", "2.0", "MiB"}, strings.Fields(lines[1])[:7])
	assert.Equal(t, "graphviz", strings.Fields(lines[2])[len(strings.Fields(lines[2]))-1])

	r = envctl(t, env, nil, "switch", "web", "1", "--expected", "2")
	require.Equal(t, 0, r.code, r.stderr)
	two := 2
	call, _ := core.LastCall("SetCurrent")
	assert.Equal(t, []any{"web", types.SetCurrentRequest{Version: 1, ExpectedCurrent: &two}}, call.Args)

	// Without --expected, the current version read first is the expectation:
	// the switch is never a blind write.
	r = envctl(t, env, nil, "switch", "web", "2")
	require.Equal(t, 0, r.code, r.stderr)
	one := 1
	call, _ = core.LastCall("SetCurrent")
	assert.Equal(t, []any{"web", types.SetCurrentRequest{Version: 2, ExpectedCurrent: &one}}, call.Args)

	r = envctl(t, env, nil, "-o", "json", "pin", "web", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"pinned": true`)
}

func TestOpWatch(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	op := core.Operations.NewOperation("save", "i-1")
	core.Operations.AppendEvent(op.ID, "spool", "spooled")
	go func() {
		time.Sleep(30 * time.Millisecond)
		core.Operations.Finish(op.ID, types.OpCanceled, nil, &types.OpError{Code: "canceled", Message: "canceled by request"})
	}()
	r := envctl(t, env, nil, "op", "watch", op.ID)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "spool: spooled\n")
	assert.Contains(t, r.stdout, "STATE:")
	assert.Contains(t, r.stderr, "canceled by request (canceled)")
}
