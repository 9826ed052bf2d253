package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
)

// FIFOs made inside a gVisor instance live in the sandbox's memory only
// (docs/gvisor.md): every path that stops it and keeps its disk says which
// it loses, as a save does. On a node whose idle reaper looks often: the
// user's stop (its answer and the instance's message), the idle stop and
// the idle hibernation (the instance's message); after a start the FIFO is
// gone, as the message said. A runc instance's FIFO is kept and its stop
// says nothing of FIFOs.
func TestRootGVisorFIFOsOnStop(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	_, cl := startJoiningNode(t, "node-gvfifo", idleNodeConfig())
	project := func(class string, idle *types.IdleSetting) string {
		name := fmt.Sprintf("gvfifo-%d", projectSeq.Add(1))
		_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: name, Base: fixtureBase, RuntimeClass: class, Idle: idle})
		require.NoError(t, err)
		return name
	}
	// withFIFO is a retained instance of p with FIFOs /root/pipe and
	// /tmp/q made inside.
	withFIFO := func(t *testing.T, p string) types.Instance {
		in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
		res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "mkfifo /root/pipe /tmp/q && test -p /root/pipe && echo made"}})
		require.NoError(t, err)
		require.Equal(t, "made\n", res.Stdout, res.Stderr)
		return in
	}
	const lost = "2 FIFOs made inside this gVisor instance are lost with this stop"
	gone := func(t *testing.T, cl *client.Client, id string) {
		res, err := cl.Exec(c, id, types.ExecRequest{Args: []string{"sh", "-c", "test -p /root/pipe && echo kept || echo gone"}, Wake: true})
		require.NoError(t, err)
		assert.Equal(t, "gone\n", res.Stdout, "the message said the FIFO is lost")
	}

	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		in := withFIFO(t, project("gvisor", nil))
		stopped, err := cl.StopInstance(c, in.ID)
		require.NoError(t, err)
		assert.Contains(t, stopped.Message, lost, "the stop's answer")
		assert.Contains(t, stopped.Message, "/root/pipe")
		assert.Contains(t, stopped.Message, "/tmp/q")
		shown, err := cl.GetInstance(c, in.ID)
		require.NoError(t, err)
		assert.Equal(t, stopped.Message, shown.Message)
		_, err = cl.StartInstance(c, in.ID)
		require.NoError(t, err)
		gone(t, cl, in.ID)
	})

	t.Run("runc", func(t *testing.T) {
		t.Parallel()
		in := withFIFO(t, project("runc", nil))
		stopped, err := cl.StopInstance(c, in.ID)
		require.NoError(t, err)
		assert.NotContains(t, stopped.Message, "FIFO")
		_, err = cl.StartInstance(c, in.ID)
		require.NoError(t, err)
		res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "test -p /root/pipe && echo kept || echo gone"}})
		require.NoError(t, err)
		assert.Equal(t, "kept\n", res.Stdout)
	})

	for _, action := range []string{types.IdleActionStop, types.IdleActionHibernate} {
		t.Run("idle "+action, func(t *testing.T) {
			t.Parallel()
			in := withFIFO(t, project("gvisor", &types.IdleSetting{After: "3s", Action: action}))
			var got types.Instance
			require.Eventually(t, func() bool {
				var err error
				got, err = cl.GetInstance(c, in.ID)
				return err == nil && got.State == types.StateStopped && got.Reason == envd.ReasonIdle
			}, 3*time.Minute, 250*time.Millisecond, "the idle reaper stops the instance")
			assert.Contains(t, got.Message, lost)
			assert.Contains(t, got.Message, "/root/pipe")
			if action == types.IdleActionHibernate {
				assert.NotZero(t, got.HibernatedVersion)
			}
			gone(t, cl, in.ID)
		})
	}
}
