package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

func TestDiffAsksForTheVersionsNamed(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "diff", "web", "3")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("VersionChanges")
	assert.Equal(t, []any{"web", 3, 0, 0}, call.Args, "against the parent, the server's limit")
	assert.Contains(t, r.stdout, "Version 3 of web against 0")

	r = envctl(t, env, nil, "-o", "json", "diff", "web", "3", "1", "--limit", "5")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("VersionChanges")
	assert.Equal(t, []any{"web", 3, 1, 5}, call.Args)
	assert.Contains(t, r.stdout, `"against": 1`)

	r = envctl(t, env, nil, "diff", "web", "x")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "x")
}

func TestChangesTableReadsPackagesFirst(t *testing.T) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	changesTable(tw, types.Changes{
		Project: "web", Version: 3, Against: 2,
		Packages: &types.PackageChanges{Manager: "dpkg",
			Added:    []types.Package{{Name: "graphviz", Version: "2.42.2-7+b3"}},
			Upgraded: []types.PackageUpgrade{{Name: "libc6", From: "2.36-9", To: "2.36-9+deb12u4"}},
			Removed:  []types.Package{{Name: "nano", Version: "7.2-1"}}},
		Added:      []types.FileChange{{Path: "/usr/bin/dot", Type: "file", Size: 2048, Mode: "0755"}, {Path: "/usr/bin/gv", Type: "symlink", Mode: "0777", Link: "dot"}},
		Modified:   []types.FileChange{{Path: "/etc/a", Type: "file", Size: 3, Mode: "0600", Was: &types.FileState{Type: "file", Size: 3, Mode: "0644"}}},
		Deleted:    []types.FileChange{{Path: "/bin/nano", Type: "file", Size: 10, Mode: "0755"}},
		Summarized: []types.DirSummary{{Path: "/var/lib/apt", Reason: "apt's state and package lists (apt-get update)", Added: 12, Bytes: 40 << 20}},
		TopDirs:    []types.DirBytes{{Path: "/usr/lib", Bytes: 30 << 20, Files: 120}},
		Totals:     types.ChangeTotals{Added: 14, Modified: 1, Deleted: 1, AddedBytes: 70 << 20},
		Truncated:  true,
	})
	require.NoError(t, tw.Flush())
	lines := strings.Split(buf.String(), "\n")
	want := []string{
		"Version 3 of web against 2",
		"",
		"Packages (dpkg): 1 added, 1 removed, 1 upgraded",
		"  + graphviz 2.42.2-7+b3",
		"  ~ libc6 2.36-9 -> 2.36-9+deb12u4",
		"  - nano 7.2-1",
		"",
		"Files: 14 added, 1 modified, 1 deleted (70.0 MiB written)",
	}
	require.GreaterOrEqual(t, len(lines), len(want))
	assert.Equal(t, want, lines[:len(want)])
	rest := strings.Join(lines[len(want):], "\n")
	assert.Regexp(t, `  A  /usr/bin/dot +file +2\.0 KiB +0755`, rest)
	assert.Regexp(t, `  A  /usr/bin/gv +symlink +-> dot`, rest)
	assert.Regexp(t, `  M  /etc/a +file +3 B +0600 \(was 0644\)`, rest)
	assert.Regexp(t, `  D  /bin/nano +file`, rest)
	assert.Contains(t, rest, "--limit N shows more")
	assert.Regexp(t, `/var/lib/apt +12 added, 0 modified, 0 deleted +40\.0 MiB +apt's state`, rest)
	assert.Regexp(t, `/usr/lib +30\.0 MiB +120 files`, rest)
}

func TestChangesOfAnInstance(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "changes", "p-1", "--limit", "7")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("InstanceChanges")
	assert.Equal(t, []any{"p-1", 7}, call.Args)
	assert.Contains(t, r.stdout, "A save of p-1 (p) now, against version 1")
	assert.Regexp(t, `Not saved:\n  /proc +runtime mount point`, r.stdout)
}

func TestVersionExportWritesTheFileWhole(t *testing.T) {
	t.Parallel()
	_, env := server(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "web-3.oci.tar")
	r := envctl(t, env, nil, "version", "export", "web", "3", "-o", out)
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "oci layout of web-3", string(b))
	assert.Contains(t, r.stderr, "wrote "+out)

	r = envctl(t, env, nil, "version", "export", "web", "3", "-o", "-")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "oci layout of web-3", r.stdout)

	r = envctl(t, env, nil, "version", "export", "web", "3")
	assert.Equal(t, 2, r.code, "a usage error without a file")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

func TestImageImportByReference(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "-o", "json", "image", "import", "--ref", "registry.example/team/dev:1", "dev")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("PullImage")
	assert.Equal(t, []any{"dev", "registry.example/team/dev:1"}, call.Args)
	assert.Contains(t, r.stdout, `"name": "dev"`)
}

func TestForkStartsTheOperation(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "fork", "p-1", "-m", "try b", "--ttl", "1h", "--retain", "--no-wait", "--idempotency-key", "k1")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("Fork")
	assert.Equal(t, []any{"p-1", types.ForkRequest{Message: "try b", TTL: "1h", Retain: true}, "k1"}, call.Args)
	assert.Contains(t, r.stdout, "fork")

	r = envctl(t, env, nil, "fork", "p-1", "--memory", "-n", "4", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("Fork")
	assert.Equal(t, []any{"p-1", types.ForkRequest{Memory: true, Count: 4}, ""}, call.Args)
}
