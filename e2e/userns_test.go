package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd/node"
)

// On a node with --userns, an instance runs in a user namespace (root
// inside, an unprivileged id outside), and its saves record the
// container's ids: restored on a node without user namespaces, and on the
// same node, files have the owners they had inside.
func TestRootUserNSNode(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	n, cl := startJoiningNode(t, "userns", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, UserNS: true})
	root, on := n.Runtime().UserNS()
	require.True(t, on)

	p := fmt.Sprintf("userns-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(c, in.ID) })
	require.Equal(t, types.StateRunning, in.State)

	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", "cat /proc/self/uid_map; id -u"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Equal(t, []string{"0", strconv.FormatUint(uint64(root), 10), "65536", "0"}, strings.Fields(res.Stdout))

	// Files made inside, as root and as another user, saved: the layer
	// records the container's ids, so a node without user namespaces
	// restores them with the same owners.
	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c",
		"echo r > /root/byroot && mkdir -p /opt/u && echo u > /opt/u/f && chown -R 1000:1001 /opt/u"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	op, err := cl.Save(c, in.ID, types.SaveRequest{Message: "in a user namespace"}, "")
	require.NoError(t, err)
	done, err := cl.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "save: %+v", done.Error)
	var sr types.SaveResult
	require.NoError(t, json.Unmarshal(done.Result, &sr))

	owners := "stat -c '%u:%g %n' /root/byroot /opt/u /opt/u/f"
	want := "0:0 /root/byroot\n1000:1001 /opt/u\n1000:1001 /opt/u/f\n"
	r, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Version: sr.Version})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, r.ID) })
	res, err = env.c.Exec(c, r.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", owners}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Equal(t, want, res.Stdout, "owners restored on a node without user namespaces")

	// And on the user namespace node, through its remapped snapshot.
	u, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{Version: sr.Version})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(c, u.ID) })
	res, err = cl.Exec(c, u.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", owners}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Equal(t, want, res.Stdout, "owners restored in a user namespace")
}
