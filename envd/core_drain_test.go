package envd_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/fakeruntime"
)

// A graceful stop: Drain waits for a running save to finish; when its
// grace ends first, it names the save still running, Close leaves it
// unfinished, and the next start runs it again to completion.
func TestCoreDrain(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("drain")

	t.Run("a save in flight finishes", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("drain", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/a", "a")
		frozen, release := holdThaw(e)
		op, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{Message: "drained"}, "")
		require.NoError(t, err)
		<-frozen
		drained := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			defer cancel()
			drained <- e.svc.Drain(ctx)
		}()
		select {
		case err := <-drained:
			t.Fatalf("Drain returned while the save ran: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		release()
		require.NoError(t, <-drained)
		got, err := e.svc.Parts().Operations.GetOperation(e.ctx, e.user, op.ID)
		require.NoError(t, err)
		assert.Equal(t, types.OpSucceeded, got.State, "the save finished before Drain returned: %+v", got.Error)
	})

	t.Run("a save past the grace runs again at the next start", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("drain", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/b", "b")
		paused := blockUntilCanceled(e.rt, fakeruntime.Pause)
		op, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{Message: "handed on"}, "")
		require.NoError(t, err)
		<-paused
		ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
		err = e.svc.Drain(ctx)
		cancel()
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), op.ID)

		e.rt.SetFault(fakeruntime.Pause, nil)
		e.restart()
		done := e.wait(e.user, op.ID)
		require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
		assert.Equal(t, "resumed", e.eventTypes(e.user, op.ID)[0])
		var res types.SaveResult
		require.NoError(t, json.Unmarshal(done.Result, &res))
		v, err := e.svc.GetVersion(e.ctx, e.user, "drain", res.Version)
		require.NoError(t, err)
		assert.Equal(t, "handed on", v.Message)
	})

	t.Run("nothing running", func(t *testing.T) {
		e := e.with(t)
		ctx, cancel := context.WithTimeout(e.ctx, time.Second)
		defer cancel()
		assert.NoError(t, e.svc.Drain(ctx))
	})
}
