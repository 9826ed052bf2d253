package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A docker instance's spec drops /proc/sys from its read-only paths and
// gets every capability; neither may reach the next instance's spec (the
// options once shared the package's lists, and a docker instance left
// /proc/sys writable in every runc instance made after it: CI's
// TestRootHardenedInstance).
func TestDockerSpecLeavesOtherSpecsHardened(t *testing.T) {
	spec := func(is InstanceSpec) *oci.Spec {
		t.Helper()
		s := &oci.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
		for _, o := range hardenOpts(is) {
			require.NoError(t, o(context.Background(), nil, &containers.Container{ID: "x"}, s))
		}
		return s
	}
	docker := spec(InstanceSpec{Class: ClassGVisor, Docker: true})
	assert.NotContains(t, docker.Linux.ReadonlyPaths, "/proc/sys")
	assert.Contains(t, docker.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
	docker.Process.Capabilities.Bounding[0] = "changed"
	for _, class := range []Class{ClassRunc, ClassGVisor} {
		s := spec(InstanceSpec{Class: class})
		assert.Contains(t, s.Linux.ReadonlyPaths, "/proc/sys", "class %s", class)
		assert.Equal(t, readonlyPaths, s.Linux.ReadonlyPaths, "class %s", class)
		assert.NotContains(t, s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN", "class %s", class)
	}
	assert.True(t, slices.Contains(readonlyPaths, "/proc/sys"), "the package's list is whole")
	assert.Equal(t, "CAP_CHOWN", allCaps[0], "the package's capability list is whole")
}
