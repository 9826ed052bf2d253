package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

// --validate keeps shell quoting: a word in quotes is one word;
// --validate-sh runs a script with sh -c.
func TestValidateIsSplitAsShellWords(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "migrate", "web", "--base", "v2", "--no-wait",
		"--validate", `sh -c 'test -e /x'`, "--validate", `printf "%s\n" "a b"`, "--validate-sh", "command -v dot && dot -V")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("Migrate")
	require.True(t, ok)
	assert.Equal(t, [][]string{{"sh", "-c", "test -e /x"}, {"printf", `%s\n`, "a b"}, {"sh", "-c", "command -v dot && dot -V"}},
		call.Args[1].(types.MigrateRequest).Validate)

	r = envctl(t, env, nil, "build", "web", "--apt", "jq", "--no-wait", "--validate", `jq --version`, "--validate-sh", "jq -n 1")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("Build")
	assert.Equal(t, [][]string{{"jq", "--version"}, {"sh", "-c", "jq -n 1"}}, call.Args[1].(types.BuildRequest).Validate)

	r = envctl(t, env, nil, "migrate", "web", "--base", "v2", "--validate", `sh -c 'open`)
	assert.Equal(t, 2, r.code, "an unterminated quote is a usage error")
	assert.Contains(t, r.stderr, "unterminated single quote")
}

// A failed migration prints its operation under -o json, with the failed
// version and the conflicts; a successful one with no conflicts prints
// "conflicts": [].
func TestMigrateFailurePrintsJSON(t *testing.T) {
	t.Parallel()
	failed := types.MigrateResult{Project: "web", Version: 5, From: 4, OldBase: "a", NewBase: "b", Conflicts: []string{"/etc/motd"}}
	core, env := server(t, func(core *apitest.Fakes) {
		core.Versions.MigrateFunc = func(_ context.Context, project string, req types.MigrateRequest, _ string) (types.Operation, error) {
			op := core.Operations.NewOperation("migrate", project)
			go func() {
				time.Sleep(20 * time.Millisecond)
				if req.Base == "bad" {
					core.Operations.Finish(op.ID, types.OpFailed, failed, &types.OpError{Code: "failed_precondition",
						Message: "validation of version 5 (marked failed): sh -c 'test -e /x' exited 1"})
				} else {
					core.Operations.Finish(op.ID, types.OpSucceeded, types.MigrateResult{Project: "web", Version: 5, From: 4, Conflicts: []string{}}, nil)
				}
			}()
			return op, nil
		}
	})
	_ = core
	r := envctl(t, env, nil, "migrate", "web", "--base", "bad", "-o", "json")
	assert.Equal(t, 1, r.code)
	var op types.Operation
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &op), r.stdout)
	assert.Equal(t, types.OpFailed, op.State)
	var res types.MigrateResult
	require.NoError(t, json.Unmarshal(op.Result, &res))
	assert.Equal(t, failed, res)
	assert.Contains(t, r.stderr, "sh -c 'test -e /x' exited 1", "the command as given")

	r = envctl(t, env, nil, "migrate", "web", "--base", "bad")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "/etc/motd", "the table shows the failed result too")

	r = envctl(t, env, nil, "migrate", "web", "--base", "good", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"conflicts": []`)
}

func TestAdminRollout(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "admin", "rollout", "create", "--from", "v1", "--to", "v2", "--tenant", "t1",
		"--project-selector", "web-*", "--validate-sh", "test -e /x", "--wave-size", "4", "--max-failures", "2", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("CreateRollout")
	require.True(t, ok)
	assert.Equal(t, types.CreateRolloutRequest{From: "v1", To: "v2", Tenant: "t1", Selector: "web-*",
		Validate: [][]string{{"sh", "-c", "test -e /x"}}, WaveSize: 4, MaxFailures: 2, DryRun: true}, call.Args[0])
	assert.Contains(t, r.stdout, "ro-1")

	r = envctl(t, env, nil, "admin", "rollout", "show", "ro-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `t1\s+web\s+switched\s+2\s+3`, r.stdout)
	assert.Contains(t, r.stdout, "switched=1")

	r = envctl(t, env, nil, "admin", "rollout", "show", "ro-1", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var ro types.Rollout
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ro))
	assert.Equal(t, map[string]int{"switched": 1}, ro.Totals)

	r = envctl(t, env, nil, "admin", "rollout", "ls")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ro-1")

	for action, state := range map[string]string{"pause": "paused", "resume": "running", "cancel": "canceled"} {
		r = envctl(t, env, nil, "admin", "rollout", action, "ro-1")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, state, action)
		call, _ := core.LastCall("RolloutAction")
		assert.Equal(t, []any{"ro-1", action}, call.Args)
	}
	// A rollback is an operation: waited for, then the rollout's report.
	r = envctl(t, env, nil, "admin", "rollout", "rollback", "ro-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `STATE:\s+rolled_back`, r.stdout)
	assert.Regexp(t, `ROLLBACK:\s+op-\d+`, r.stdout)
	assert.Regexp(t, `t1\s+web\s+rolled_back\s+2\s+3`, r.stdout)
	call, _ = core.LastCall("RollbackRollout")
	assert.Equal(t, []any{"ro-1"}, call.Args)
	r = envctl(t, env, nil, "admin", "rollout", "rollback", "ro-1", "--no-wait", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var op types.Operation
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &op), r.stdout)
	assert.Equal(t, types.OpKindRollback, op.Kind)
	assert.Equal(t, "ro-1", op.Target)
	r = envctl(t, env, nil, "admin", "rollout", "create", "--from", "v1")
	assert.Equal(t, 2, r.code, "--to is required")

	r = envctl(t, env, nil, "project", "validation", "web", "--validate", "dot -V", "--validate-sh", "test -x /usr/bin/dot")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "dot -V; sh -c 'test -x /usr/bin/dot'")
}

// project show says which base the current version sits on and that a
// rollout failed; show says a newer base is current.
func TestShowsBasesAndRolloutFailure(t *testing.T) {
	t.Parallel()
	_, env := server(t, func(core *apitest.Fakes) {
		core.Projects.GetProjectFunc = func(_ context.Context, name string) (types.Project, error) {
			return types.Project{Name: name, BaseImage: "envd/images/v1@sha256:1", Current: 3, CurrentBase: "v2 (envd/images/v2@sha256:2)",
				RolloutFailure: &types.RolloutFailure{Rollout: "ro-9", Status: "validation_failed", Message: "dot -V exited 1", At: apitest.Epoch},
				CreatedAt:      apitest.Epoch}, nil
		}
		core.Instances.GetInstanceFunc = func(_ context.Context, id string) (types.Instance, error) {
			return types.Instance{ID: id, Project: "web", Version: 2, NewerCurrent: 3, State: types.StateRunning, CreatedAt: apitest.Epoch}, nil
		}
	})
	r := envctl(t, env, nil, "project", "show", "web")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `CURRENT BASE:\s+v2 \(envd/images/v2@sha256:2\)`, r.stdout)
	assert.Regexp(t, `ROLLOUT FAILED:\s+validation_failed in rollout ro-9`, r.stdout)
	r = envctl(t, env, nil, "show", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `NEWER CURRENT:\s+version 3 \(a newer base\) is current`, r.stdout)
}
