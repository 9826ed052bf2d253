package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/objstore"
)

// A checkpoint's point-in-time copy: Freeze blocks the volume's writers
// until Copy has copied the image; the copy archives what the volume held
// at the freeze; RestoreInPlace brings that back into the mounted volume
// (the mount stays, as an instance's bind mount would), and a missing
// archive changes nothing.
func TestRootVolumeFreezeCopyRestoreInPlace(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	m := newManager(t)
	s := Spec{Name: "work", Path: "/workspace", SizeBytes: 64 << 20}
	dir, err := m.Ensure(ctx, "acme/p", s)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "state"), []byte("B"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("kept"), 0o600))

	f, err := m.Freeze(ctx, "acme/p", s)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(dir, "state"), []byte("B2"), 0o644) }()
	select {
	case err := <-wrote:
		t.Fatalf("a write to a frozen volume went through (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	img := filepath.Join(t.TempDir(), "copy.img")
	_, err = f.Copy(ctx, img)
	require.NoError(t, err)
	require.NoError(t, <-wrote, "the write goes on after the thaw")
	assert.Zero(t, f.Thaw(), "a second thaw does nothing")

	store, err := objstore.NewDir(filepath.Join(t.TempDir(), "objects"))
	require.NoError(t, err)
	info, err := ArchiveCopy(ctx, img, store, "checkpoints/acme/p/work/1.tar.zst")
	require.NoError(t, err)
	assert.Equal(t, 3, info.Files, "state, sub, sub/f")
	_, err = os.Stat(img)
	assert.ErrorIs(t, err, os.ErrNotExist, "the copy is deleted")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "later"), []byte("x"), 0o644))
	require.NoError(t, m.RestoreInPlace(ctx, "acme/p", s, store, "checkpoints/acme/p/work/1.tar.zst"))
	b, err := os.ReadFile(filepath.Join(dir, "state"))
	require.NoError(t, err)
	assert.Equal(t, "B", string(b), "the content at the freeze")
	b, err = os.ReadFile(filepath.Join(dir, "sub", "f"))
	require.NoError(t, err)
	assert.Equal(t, "kept", string(b))
	_, err = os.Stat(filepath.Join(dir, "later"))
	assert.ErrorIs(t, err, os.ErrNotExist, "later writes are gone")

	err = m.RestoreInPlace(ctx, "acme/p", s, store, "checkpoints/acme/p/work/missing.tar.zst")
	require.Error(t, err)
	b, err = os.ReadFile(filepath.Join(dir, "state"))
	require.NoError(t, err)
	assert.Equal(t, "B", string(b), "a missing archive changes nothing")

	// A freeze whose process died is thawed by ThawAll (a node's start).
	f, err = m.Freeze(ctx, "acme/p", s)
	require.NoError(t, err)
	require.NoError(t, m.ThawAll(ctx))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "after-crash"), []byte("x"), 0o644), "thawed: writes go through")
	f.Thaw()
	require.NoError(t, m.Remove(ctx, "acme/p", "work"))
}
