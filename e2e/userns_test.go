package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/errdefs"
)

// On a node with --userns, an instance runs in a user namespace (root
// inside, an unprivileged id outside) and a save of it is refused up front
// with failed_precondition.
func TestRootUserNSNode(t *testing.T) {
	c := ctx(t)
	n, cl := startJoiningNode(t, "userns", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, UserNS: true})
	root, on := n.Runtime().UserNS()
	require.True(t, on)

	p := fmt.Sprintf("userns-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, envd.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, envd.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(c, in.ID) })
	require.Equal(t, envd.StateRunning, in.State)

	res, err := cl.Exec(c, in.ID, envd.ExecRequest{Args: []string{"/bin/sh", "-c", "cat /proc/self/uid_map; id -u"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Equal(t, []string{"0", strconv.FormatUint(uint64(root), 10), "65536", "0"}, strings.Fields(res.Stdout))

	_, err = cl.Save(c, in.ID, envd.SaveRequest{Message: "in a user namespace"}, "")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), "user namespace")
	vs, err := cl.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 1, "no version was made")
}
