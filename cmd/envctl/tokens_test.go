package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apitest"
)

func TestAdminTokenCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want types.CreateTokenRequest
	}{
		{"old form", []string{"admin", "token", "acme"}, types.CreateTokenRequest{}},
		{"old form with flags", []string{"admin", "token", "acme", "--admin", "--expires", "1h"}, types.CreateTokenRequest{Admin: true, ExpiresIn: "1h"}},
		{"create", []string{"admin", "token", "create", "acme", "--expires", "720h"}, types.CreateTokenRequest{ExpiresIn: "720h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			core, env := server(t)
			r := envctl(t, env, nil, tt.args...)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Equal(t, "tok-acme", strings.TrimSpace(r.stdout), "only the token, to pipe into a file")
			call, ok := core.LastCall("CreateToken")
			require.True(t, ok)
			assert.Equal(t, []any{"acme", tt.want}, call.Args)
		})
	}
}

func TestAdminTokenLsAndRevoke(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "admin", "token", "ls", "acme")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	assert.Equal(t, []string{"ID", "TENANT", "ADMIN", "CREATED", "EXPIRES", "LAST", "USED", "STATE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"1", "acme", "yes"}, strings.Fields(lines[1])[:3])
	assert.Equal(t, "live", lastField(lines[1]))
	assert.Equal(t, "expired", lastField(lines[2]), "the fake's token 2 expired a day after 2026-01-02")
	assert.NotContains(t, r.stdout, apitest.Token)
	call, _ := core.LastCall("ListTokens")
	assert.Equal(t, []any{"acme"}, call.Args)

	r = envctl(t, env, nil, "-o", "json", "admin", "token", "ls")
	require.Equal(t, 0, r.code, r.stderr)
	var ts []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ts), r.stdout)
	require.Len(t, ts, 2)
	assert.NotContains(t, ts[0], "token")
	call, _ = core.LastCall("ListTokens")
	assert.Equal(t, []any{""}, call.Args)

	r = envctl(t, env, nil, "admin", "token", "revoke", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "revoked")
	call, _ = core.LastCall("RevokeToken")
	assert.Equal(t, []any{int64(2)}, call.Args)

	r = envctl(t, env, nil, "token", "revoke", "3")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("RevokeToken")
	assert.Equal(t, []any{int64(3)}, call.Args)

	for _, bad := range []string{"x", "0", "-1"} {
		r = envctl(t, env, nil, "admin", "token", "revoke", "--", bad)
		assert.Equal(t, 2, r.code, "%q: %s", bad, r.stderr)
	}
}

func lastField(line string) string {
	f := strings.Fields(line)
	return f[len(f)-1]
}

func TestVolumeArchives(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "volume", "archives", "web")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.Equal(t, []string{"VOLUME", "NAME", "BYTES", "FILES", "NODE", "CREATED"}, strings.Fields(lines[0])[:6])
	assert.Equal(t, []string{"work", "a1"}, strings.Fields(lines[1])[:2])
	call, _ := core.LastCall("ListArchives")
	assert.Equal(t, []any{"web", ""}, call.Args)

	r = envctl(t, env, nil, "volume", "archives", "web", "--volume", "home")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("ListArchives")
	assert.Equal(t, []any{"web", "home"}, call.Args)

	r = envctl(t, env, nil, "volume", "archive", "web", "work", "--name", "before-upgrade", "--replace")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("ArchiveVolume")
	assert.Equal(t, []any{"web", "work", types.VolumeArchiveRequest{Name: "before-upgrade", Replace: true}}, call.Args)

	r = envctl(t, env, nil, "volume", "restore", "web", "work", "--name", "before-upgrade")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("RestoreVolume")
	assert.Equal(t, []any{"web", "work", types.VolumeArchiveRequest{Name: "before-upgrade"}}, call.Args)

	for _, args := range [][]string{
		{"volume", "restore", "web", "work"},
		{"volume", "restore", "web", "work", "--name", "a", "--key", "k"},
	} {
		r = envctl(t, env, nil, args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}

	r = envctl(t, env, nil, "volume", "archive-rm", "web", "work", "a1")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("DeleteArchive")
	assert.Equal(t, []any{"web", "work", "a1"}, call.Args)
}
