package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// The identity a Root acts as, as root: permission checks are the
// kernel's for that user, created entries are that user's, and ids map
// through a user namespace's range.
func TestRootFilesIdentity(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "private"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "private", "secret"), []byte("s"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "home"), 0o755))
	require.NoError(t, os.Chown(filepath.Join(dir, "home"), 1000, 1000))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "team"), 0o770))
	require.NoError(t, os.Chmod(filepath.Join(dir, "team"), 0o770)) // umask notwithstanding
	require.NoError(t, os.Chown(filepath.Join(dir, "team"), 0, 2000))
	ctx := context.Background()
	owner := func(p string) (uint32, uint32) {
		st, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		s := st.Sys().(*syscall.Stat_t)
		return s.Uid, s.Gid
	}

	t.Run("a user", func(t *testing.T) {
		r, err := Open(dir, Identity{UID: 1000, GID: 1000})
		require.NoError(t, err)
		defer r.Close()
		_, _, err = r.OpenFile(ctx, "/private/secret")
		require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
		_, err = r.WriteFile(ctx, "/x", strings.NewReader("x"), WriteOptions{})
		require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
		_, err = r.WriteFile(ctx, "/home/f", strings.NewReader("x"), WriteOptions{})
		require.NoError(t, err)
		uid, gid := owner("home/f")
		assert.Equal(t, [2]uint32{1000, 1000}, [2]uint32{uid, gid})
		_, err = r.WriteFile(ctx, "/team/f", strings.NewReader("x"), WriteOptions{})
		require.ErrorIs(t, err, errdefs.ErrPermissionDenied, "not in the group")
	})
	t.Run("a user with a supplementary group", func(t *testing.T) {
		r, err := Open(dir, Identity{UID: 1000, GID: 1000, Groups: []uint32{2000}})
		require.NoError(t, err)
		defer r.Close()
		_, err = r.WriteFile(ctx, "/team/f", strings.NewReader("x"), WriteOptions{})
		require.NoError(t, err)
	})
	t.Run("the instance's root in a user namespace", func(t *testing.T) {
		r, err := Open(dir, Identity{UID: 0, GID: 0, HostBase: 100000, HostSize: 65536})
		require.NoError(t, err)
		defer r.Close()
		_, err = r.Mkdir(ctx, "/private/made", 0o755, false)
		require.NoError(t, err)
		uid, gid := owner("private/made")
		assert.Equal(t, [2]uint32{100000, 100000}, [2]uint32{uid, gid})
		l, err := r.List(ctx, "/home", ListOptions{})
		require.NoError(t, err)
		require.Len(t, l.Entries, 1)
		assert.Equal(t, overflowID, l.Entries[0].UID, "a host id outside the range shows as nobody")
		_, err = Open(dir, Identity{UID: 70000, HostBase: 100000, HostSize: 65536})
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	})
	t.Run("credentials do not leak to other goroutines", func(t *testing.T) {
		r, err := Open(dir, Identity{UID: 1000, GID: 1000})
		require.NoError(t, err)
		defer r.Close()
		for range 50 {
			_, _, _ = r.OpenFile(ctx, "/private/secret")
		}
		// This goroutine (and any thread) still acts as root.
		b, err := os.ReadFile(filepath.Join(dir, "private", "secret"))
		require.NoError(t, err)
		assert.Equal(t, "s", string(b))
	})
}
