package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// A node refuses to start on a runc without the CVE-2024-21626 fix, unless
// told to run anyway, and shows the runc it judged in envd info.
func TestCheckRuncAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runc := filepath.Join(dir, "runc")
	require.NoError(t, os.WriteFile(runc, []byte("#!/bin/sh\nprintf 'runc version 1.1.11\\ncommit: v1.1.11-0-g4bccb38c\\n'\n"), 0o755))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	n := &Node{cfg: Config{Logger: quiet}, components: map[string]string{}}
	err := n.checkRunc(context.Background(), runc, filepath.Join(dir, "no-changelog"))
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.ErrorContains(t, err, "CVE-2024-21626")
	assert.ErrorContains(t, err, "--allow-vulnerable-runc")

	n = &Node{cfg: Config{Logger: quiet, AllowVulnerableRunc: true}, components: map[string]string{}}
	require.NoError(t, n.checkRunc(context.Background(), runc, filepath.Join(dir, "no-changelog")))
	assert.Contains(t, n.components["runc"], "VULNERABLE")

	n = &Node{cfg: Config{Logger: quiet}, components: map[string]string{}}
	require.NoError(t, n.checkRunc(context.Background(), "", runcChangelog), "this machine's runc")
	assert.Contains(t, n.components["runc"], "runc")
}
