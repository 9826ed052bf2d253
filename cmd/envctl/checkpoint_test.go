package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

func TestCheckpointCommands(t *testing.T) {
	t.Parallel()
	core, env := server(t)

	r := envctl(t, env, nil, "checkpoint", "p-1", "-m", "before", "--set-current", "--no-wait", "--idempotency-key", "k1")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("Checkpoint")
	assert.Equal(t, []any{"p-1", types.CheckpointRequest{Message: "before", SetCurrent: true}, "k1"}, call.Args)
	assert.Contains(t, r.stdout, "checkpoint")

	r = envctl(t, env, nil, "checkpoint", "p-1", "--memory", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("Checkpoint")
	assert.Equal(t, types.CheckpointRequest{Memory: true}, call.Args[1], "--memory asks for the processes too")

	r = envctl(t, env, nil, "checkpoints", "p", "-o", "name")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "2\n1\n", r.stdout)

	r = envctl(t, env, nil, "checkpoint", "show", "p", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "work: 2.0 KiB, 3 files")
	call, _ = core.LastCall("GetCheckpoint")
	assert.Equal(t, []any{"p", 2}, call.Args)

	r = envctl(t, env, nil, "checkpoint", "rm", "p", "1")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("DeleteCheckpoint")
	assert.Equal(t, []any{"p", 1}, call.Args)

	r = envctl(t, env, nil, "checkpoint", "rm", "p", "x")
	assert.Equal(t, 2, r.code, "a checkpoint id that is not a number is a usage error")

	r = envctl(t, env, nil, "up", "p", "--checkpoint", "2")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("CreateInstance")
	assert.Equal(t, types.CreateInstanceRequest{Checkpoint: 2}, call.Args[1])

	r = envctl(t, env, nil, "volume", "restore", "p", "work", "--checkpoint", "2")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("RestoreVolume")
	assert.Equal(t, types.VolumeArchiveRequest{Checkpoint: 2}, call.Args[2])

	r = envctl(t, env, nil, "volume", "restore", "p", "work", "--checkpoint", "2", "--name", "a")
	assert.Equal(t, 2, r.code, "two sources of one restore are a usage error")
}

// checkpoint export writes the server's tar to -o FILE; checkpoint import
// sends a file's bytes as the upload.
func TestCheckpointExportImport(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	out := filepath.Join(t.TempDir(), "p-2.tar")
	r := envctl(t, env, nil, "checkpoint", "export", "p", "2", "-o", out)
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "checkpoint layout of p-2", string(b))
	call, _ := core.LastCall("ExportCheckpoint")
	assert.Equal(t, []any{"p", 2}, call.Args)

	r = envctl(t, env, nil, "checkpoint", "export", "p", "2")
	assert.Equal(t, 2, r.code, "-o FILE is required")

	in := filepath.Join(t.TempDir(), "in.tar")
	require.NoError(t, os.WriteFile(in, []byte("a checkpoint tar"), 0o600))
	r = envctl(t, env, nil, "checkpoint", "import", "q", in)
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("ImportCheckpoint")
	assert.Equal(t, []any{"q", "a checkpoint tar"}, call.Args)
	assert.Contains(t, r.stdout, "3", "the new checkpoint is shown")
}
