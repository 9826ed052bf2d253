package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// An imperative apt-get install, saved, exports as a spec (the package at
// its version, the /etc file the user wrote); a build of that spec on the
// base makes a version whose package set equals the original's.
func TestRootSpecExportRebuildsAnImperativeInstall(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDebian(t)
	p := fmt.Sprintf("spec-export-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base})
	require.NoError(t, err)

	in := up(t, p, 0)
	mustSh(t, in.ID, "apt-get -o Acquire::Retries=3 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tree >/dev/null")
	mustSh(t, in.ID, "printf 'color=blue\\n' > /etc/envd-spec-test.conf")
	_, saved := save(t, in.ID, "tree by hand")
	require.Equal(t, 2, saved.Version)

	vs, err := env.c.VersionSpec(c, p, 2)
	require.NoError(t, err)
	assert.False(t, vs.Declared, "a snapshot's spec is derived from its changes")
	assert.Equal(t, 1, vs.BaseVersion)
	assert.Equal(t, "apt", vs.Spec.Manager)
	var tree string
	for _, pk := range vs.Spec.Packages {
		if strings.HasPrefix(pk, "tree=") {
			tree = pk
		}
	}
	require.NotEmpty(t, tree, "the package with its version: %q", vs.Spec.Packages)
	var conf *types.BuildFile
	for i, f := range vs.Spec.Files {
		if f.Path == "/etc/envd-spec-test.conf" {
			conf = &vs.Spec.Files[i]
		}
		assert.False(t, strings.HasPrefix(f.Path, "/var/"), "only /etc files: %s", f.Path)
	}
	if conf == nil {
		ch, err := env.c.VersionChanges(c, p, 2, 1, 0)
		require.NoError(t, err)
		var etc []string
		for _, fc := range append(ch.Added, ch.Modified...) {
			if strings.HasPrefix(fc.Path, "/etc") {
				etc = append(etc, fc.Path+" "+fc.Type)
			}
		}
		t.Fatalf("the user's /etc file is not in the spec: files %+v, omitted %+v; changed under /etc: %q", vs.Spec.Files, vs.Omitted, etc)
	}
	assert.Equal(t, "color=blue\n", conf.Content)

	// The exported spec builds as it is.
	res := runBuild(t, p, vs.Spec)
	require.Equal(t, 3, res.Version)
	diff, err := env.c.VersionChanges(c, p, 3, 2, 0)
	require.NoError(t, err)
	if diff.Packages != nil {
		assert.Empty(t, diff.Packages.Added, "the rebuilt version has the original's packages")
		assert.Empty(t, diff.Packages.Removed)
		assert.Empty(t, diff.Packages.Upgraded)
	}
	against, err := env.c.VersionChanges(c, p, 3, 1, 0)
	require.NoError(t, err)
	require.NotNil(t, against.Packages, "the check above compared real package sets")
	assert.NotEmpty(t, against.Packages.Added)
	rebuilt := up(t, p, 3)
	assert.Equal(t, "color=blue", mustSh(t, rebuilt.ID, "cat /etc/envd-spec-test.conf"))
	assert.Contains(t, mustSh(t, rebuilt.ID, "tree --version"), "tree v")

	// A build version answers its declared spec.
	declared, err := env.c.VersionSpec(c, p, 3)
	require.NoError(t, err)
	assert.True(t, declared.Declared)
	assert.Equal(t, vs.Spec.Packages, declared.Spec.Packages)
}

// A build with files (inline and from an uploaded context), env and run
// steps streams its output as log events while it runs and keeps it for
// envctl op logs; argv steps see shell characters as plain bytes; bad
// specs are refused before anything starts.
func TestRootSpecBuildWithFilesEnvRunAndLogs(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "spec-build")

	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	body := []byte("#!/bin/sh\necho from the context\n")
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "bin/hello", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}))
	_, err := tw.Write(body)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	bc, err := env.c.UploadBuildContext(c, p, bytes.NewReader(tb.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, 1, bc.Files)

	req := types.BuildRequest{
		Context: bc.Context,
		Files: []types.BuildFile{
			{Path: "/etc/app/config", Content: "level=3\n", Mode: "0600"},
			{Path: "/usr/local/bin/hello", Source: "bin/hello", Mode: "0755"},
		},
		Env: map[string]string{"GREETING": "hi there"},
		Run: []types.BuildStep{
			{Args: []string{"echo", "plain; $(not run) `x` > nowhere"}},
			{Args: []string{`echo "$GREETING" > /etc/greeting; echo wrote greeting`}, Shell: true},
			{Args: []string{"/usr/local/bin/hello"}},
			{Args: []string{"pwd"}, Dir: "/etc/app"},
		},
		Validate: [][]string{{"test", "-x", "/usr/local/bin/hello"}},
	}
	done, log := buildWithLog(t, p, req)
	require.Equalf(t, types.OpSucceeded, done.State, "%+v", done.Error)
	assert.Contains(t, log, "plain; $(not run) `x` > nowhere", "argv: no shell read it")
	assert.Contains(t, log, "wrote greeting")
	assert.Contains(t, log, "from the context")
	assert.Contains(t, log, "/etc/app", "the step ran in its dir")
	assert.Contains(t, log, "+ file /etc/app/config", "each step has a header line")

	var kept bytes.Buffer
	_, err = env.c.OperationLogs(c, done.ID, &kept)
	require.NoError(t, err)
	assert.Contains(t, kept.String(), "plain; $(not run) `x` > nowhere", "the log is kept after the build")
	assert.Contains(t, kept.String(), "from the context")

	var res types.BuildResult
	require.NoError(t, json.Unmarshal(done.Result, &res))
	in := up(t, p, res.Version)
	assert.Equal(t, "hi there", mustSh(t, in.ID, "cat /etc/greeting"), "env reached the shell step")
	assert.Equal(t, "level=3", mustSh(t, in.ID, "cat /etc/app/config"))
	assert.Equal(t, "600", mustSh(t, in.ID, "stat -c %a /etc/app/config"))
	assert.Equal(t, "from the context", mustSh(t, in.ID, "hello"))
	assert.Equal(t, "", mustSh(t, in.ID, "ls nowhere 2>/dev/null; true"), "the argv's > made no file")

	vs, err := env.c.VersionSpec(c, p, res.Version)
	require.NoError(t, err)
	assert.True(t, vs.Declared)
	assert.Equal(t, req.Run, vs.Spec.Run)
	assert.Equal(t, req.Files, vs.Spec.Files)

	_, err = env.c.OperationLogs(c, "op-does-not-exist", &kept)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	for name, bad := range map[string]types.BuildRequest{
		"relative path":          {Files: []types.BuildFile{{Path: "../etc/passwd", Content: "x"}}},
		"path leaving the root":  {Files: []types.BuildFile{{Path: "/etc/../../etc/passwd", Content: "x"}}},
		"the root":               {Files: []types.BuildFile{{Path: "/", Content: "x"}}},
		"a runtime mount":        {Files: []types.BuildFile{{Path: "/proc/x", Content: "x"}}},
		"package with shell":     {Manager: "apk", Packages: []string{"tree; id"}},
		"source outside context": {Context: bc.Context, Files: []types.BuildFile{{Path: "/x", Source: "../etc/shadow"}}},
		"shell with two strings": {Run: []types.BuildStep{{Args: []string{"echo", "x"}, Shell: true}}},
		"empty step":             {Run: []types.BuildStep{{Args: []string{}}}},
		"bad env name":           {Env: map[string]string{"A-B": "x"}, Run: []types.BuildStep{{Args: []string{"true"}}}},
		"nothing to do":          {},
	} {
		_, err := env.c.Build(c, p, bad)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
	}
	_, err = env.c.Build(c, p, types.BuildRequest{Context: "sha256:" + strings.Repeat("a", 64),
		Files: []types.BuildFile{{Path: "/x", Source: "y"}}})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "a context never uploaded")
}

// A migration in mode rebuild builds the current version's declared spec
// again on the new base: the new base's files and the spec's are both
// there, and the result is a build that keeps the spec. A version without
// a declared spec is refused in that mode, at once.
func TestRootSpecMigrateRebuild(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	newBase := fmt.Sprintf("fixture-spec-b-%d", projectSeq.Add(1))
	importNewBase(t, newBase)
	p := newProject(t, "spec-rebuild")
	req := types.BuildRequest{
		Files:  []types.BuildFile{{Path: "/etc/motd", Content: "the project's motd\n"}},
		Run:    []types.BuildStep{{Args: []string{"sh", "-c", "cat /etc/base-version 2>/dev/null > /etc/built-on || echo A > /etc/built-on"}}},
		Switch: true,
	}
	built := runBuild(t, p, req)
	require.Equal(t, 2, built.Version)

	op, err := env.c.Migrate(c, p, types.MigrateRequest{Base: newBase, Mode: types.MigrateRebuild, Switch: true,
		Validate: [][]string{{"test", "-f", "/etc/base-version"}}})
	res := succeeded[types.MigrateResult](t, op, err)
	assert.Equal(t, types.MigrateRebuild, res.Mode)
	assert.True(t, res.Current)
	assert.Empty(t, res.Conflicts, "a rebuild rebases nothing")
	v, err := env.c.GetVersion(c, p, res.Version)
	require.NoError(t, err)
	assert.Equal(t, "build", v.Kind)
	baseV, err := env.c.GetVersion(c, p, v.Parent)
	require.NoError(t, err)
	assert.Equal(t, "base", baseV.Kind, "built on a base version of the new base")

	in := up(t, p, 0)
	assert.Equal(t, "B", mustSh(t, in.ID, "cat /etc/built-on"), "the run step ran again, on the new base")
	assert.Equal(t, "the project's motd", mustSh(t, in.ID, "cat /etc/motd"), "the spec's file over the new base's")
	var logs bytes.Buffer
	_, err = env.c.OperationLogs(c, op.ID, &logs)
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "+ file /etc/motd")
	vs, err := env.c.VersionSpec(c, p, res.Version)
	require.NoError(t, err)
	assert.True(t, vs.Declared, "the rebuilt version keeps its spec: it can be rebuilt again")

	// A snapshot has no declared spec.
	in2 := up(t, p, 0)
	mustSh(t, in2.ID, "echo mine > /etc/mine")
	save(t, in2.ID, "by hand")
	_, err = env.c.Migrate(c, p, types.MigrateRequest{Base: fixtureBase, Mode: types.MigrateRebuild})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = env.c.Migrate(c, p, types.MigrateRequest{Base: fixtureBase, Mode: "squash"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
