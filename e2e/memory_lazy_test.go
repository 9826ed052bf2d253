package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/registry/memimage/lazyfs"
)

// A process whose state lives only in memory is checkpointed on one gVisor
// node and resumed on another whose memory restore is lazy (the image
// served from the registry as it is read, runsc restoring in the
// background): the counter goes on from where it was, and once the
// resume has answered no lazy mount is left in the node's mount table
// (registry/memimage/lazyfs has the tests with a registry that holds a
// chunk back or fails).
func TestRootCheckpointMemoryResumesLazilyOnAnotherNode(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	_, ca := startJoiningNode(t, "lazymem-a", &node.Config{DefaultTTL: time.Hour, RuntimeClass: "gvisor"})
	_, cb := startJoiningNode(t, "lazymem-b", &node.Config{DefaultTTL: time.Hour, RuntimeClass: "gvisor", MemoryRestore: "lazy"})
	p := fmt.Sprintf("memlazy-%d", projectSeq.Add(1))
	_, err := ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)

	a, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = ca.Exec(c, a.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	before := countPast(t, ca, a.ID, 5)
	cp := memCheckpoint(t, ca, a.ID).Checkpoint
	require.NotNil(t, cp.Memory)
	_, err = ca.DeleteInstance(c, a.ID)
	require.NoError(t, err)

	start := time.Now()
	in, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cb.DeleteInstance(context.Background(), in.ID) })
	require.Equal(t, "lazymem-b", in.Node)
	require.Equal(t, types.StateRunning, in.State)
	first := countIn(t, cb, in.ID)
	t.Logf("lazy resume of a %d-byte memory image answered in %v: counter %d (%d before the checkpoint)",
		cp.Memory.Bytes, time.Since(start), first, before)
	assert.GreaterOrEqual(t, first, before, "the resumed counter starts from its checkpointed value")
	next := countPast(t, cb, in.ID, first)
	t.Logf("then %d", next)
	assert.Empty(t, lazyMounts(t), "the resume left its memory image mounted")
}

// lazyMounts lists this process's lazy memory image mounts.
func lazyMounts(t *testing.T) []string {
	t.Helper()
	infos, err := mountinfo.Read("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, in := range infos {
		if in.FSType == "fuse."+lazyfs.FSName && strings.Contains(in.MountPoint, "lazymem-") {
			out = append(out, in.MountPoint)
		}
	}
	return out
}
