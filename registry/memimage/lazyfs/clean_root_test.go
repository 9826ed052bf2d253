package lazyfs

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/registry/memimage"
)

// helperEnv makes the test binary the process that serves a mount and is
// killed (TestRootCleanMountsAfterAKill).
const helperEnv = "ENVD_LAZYFS_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		serveUntilKilled(dir)
		return
	}
	os.Exit(m.Run())
}

// serveUntilKilled pushes a small image into a registry of its own,
// mounts it under dir, says so in dir/ready, and waits to be killed.
func serveUntilKilled(dir string) {
	t := &testing.T{}
	direct, _, _ := startRegistry(t)
	img := filepath.Join(dir, "src")
	must(os.Mkdir(img, 0o700))
	for name, n := range map[string]int{"checkpoint.img": 10_000, "pages_meta.img": 100, "pages.img": 3 << 20} {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		must(os.WriteFile(filepath.Join(img, name), b, 0o600))
	}
	res, err := direct.Push(context.Background(), memimage.PushRequest{Dir: img, Repo: repo})
	must(err)
	mdir := filepath.Join(dir, "resume")
	must(os.Mkdir(mdir, 0o700))
	_, err = Open(context.Background(), direct, res.Artifact, mdir)
	must(err)
	must(os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600))
	select {}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// A process serving a lazy mount is killed: its mount stays in the table,
// dead (the directory cannot be removed); CleanMounts of the work dir takes
// it out, and the scratch can go, as at a node's start.
func TestRootCleanMountsAfterAKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE mounts)")
	}
	work := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+work)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(work, "ready"))
		return err == nil
	}, 2*time.Minute, 50*time.Millisecond, "the helper did not mount")
	mnt := filepath.Join(work, "resume", "mnt")
	require.Equal(t, []string{mnt}, mountsUnder(t, work))

	require.NoError(t, cmd.Process.Kill())
	<-exited
	_, err := os.Stat(filepath.Join(mnt, "pages.img"))
	require.Error(t, err, "the dead mount answers nothing")
	require.Error(t, os.RemoveAll(work), "a dead mount blocks the scratch's removal")

	require.NoError(t, CleanMounts(work))
	assert.Empty(t, mountsUnder(t, work))
	assert.NoError(t, os.RemoveAll(work))
}
