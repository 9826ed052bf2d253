// Package gvisortest is what root tests of gVisor's runsc share: runsc
// found where scripts/setup.sh installs it, and a private containerd with
// one image unpacked whose containers run on runsc through runc's shim
// (docs/gvisor.md says why that shim).
package gvisortest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	envdruntime "github.com/envd-dev/envd/runtime"
)

// RequireRunsc returns runsc's path ($ENVD_GVISOR_DIR or
// runtime.DefaultGVisorDir), failing the test when it is not root or
// runsc is not installed.
func RequireRunsc(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (containerd, runsc, overlayfs)")
	}
	dir := os.Getenv("ENVD_GVISOR_DIR")
	if dir == "" {
		dir = envdruntime.DefaultGVisorDir
	}
	runsc := filepath.Join(dir, "runsc")
	if _, err := os.Stat(runsc); err != nil {
		t.Fatalf("runsc is not installed (scripts/setup.sh installs it; see docs/gvisor.md): %v", err)
	}
	return runsc
}

// Node is a private containerd with one image unpacked into its overlayfs
// snapshotter, and a runsc state root of its own.
type Node struct {
	C         *client.Client
	Image     client.Image
	Runsc     string
	RunscRoot string
}

// StartNode starts a Node in containerd namespace ns with the image of
// archive (a docker-archive tar); the test's cleanup stops it.
func StartNode(t *testing.T, runsc, ns string, archive []byte) *Node {
	t.Helper()
	ctx := context.Background()
	// Not t.TempDir(): a long test name would make containerd's socket
	// path longer than a unix socket path may be.
	dir, err := os.MkdirTemp("", "gvisortest-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	runscRoot := filepath.Join(dir, "runsc")
	// runsc bind-mounts an empty network namespace for its gofers at
	// ROOT/NAMESPACE/null-netns and leaves it there for the next sandbox;
	// concurrent creations can stack several.
	t.Cleanup(func() {
		for unix.Unmount(filepath.Join(runscRoot, ns, "null-netns"), unix.MNT_DETACH) == nil {
		}
	})
	d, err := envdruntime.StartDaemon(ctx, filepath.Join(dir, "containerd"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	c, err := client.New(d.Address(), client.WithDefaultNamespace(ns))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	imgs, err := c.Import(ctx, bytes.NewReader(archive))
	require.NoError(t, err)
	require.Len(t, imgs, 1)
	image := client.NewImage(c, imgs[0])
	require.NoError(t, image.Unpack(ctx, "overlayfs"))
	return &Node{C: c, Image: image, Runsc: runsc, RunscRoot: runscRoot}
}

// NewContainer makes a container of args on a fresh snapshot of the image,
// run by runsc through runc's shim; the test's cleanup kills its task and
// deletes it with its snapshot.
func (n *Node) NewContainer(t *testing.T, id string, args ...string) client.Container {
	t.Helper()
	ctx := context.Background()
	ctr, err := n.C.NewContainer(ctx, id,
		client.WithSnapshotter("overlayfs"),
		client.WithNewSnapshot(id, n.Image),
		client.WithNewSpec(oci.WithImageConfig(n.Image), oci.WithProcessArgs(args...)),
		client.WithRuntime(plugins.RuntimeRuncV2, &options.Options{BinaryName: n.Runsc, Root: n.RunscRoot}),
	)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		if task, err := ctr.Task(ctx, nil); err == nil {
			_, _ = task.Delete(ctx, client.WithProcessKill)
		}
		_ = ctr.Delete(ctx, client.WithSnapshotCleanup)
	})
	return ctr
}
