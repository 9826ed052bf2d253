package envd_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
)

// idleAfter is the idle setting of these tests: short, and long enough
// that a test's own steps are not idle.
const idleAfter = 2 * time.Second

func newIdleEnv(t *testing.T) *coreEnv {
	return newCoreEnv(t, func(c *envd.Config) {
		c.IdleInterval = 100 * time.Millisecond
		c.ActivityFlush = 200 * time.Millisecond
		c.WakeWait = 30 * time.Second
	})
}

// idleProject creates a project whose instances idle after idleAfter.
func (e *coreEnv) idleProject(name, action string) {
	e.t.Helper()
	e.project(name)
	p, err := e.svc.SetProjectIdle(e.ctx, e.user, name, types.IdleSetting{After: idleAfter.String(), Action: action})
	require.NoError(e.t, err)
	require.Equal(e.t, &types.IdleSetting{After: idleAfter.String(), Action: action}, p.Idle)
}

// stoppedByIdle waits for the idle reaper to stop instance id.
func (e *coreEnv) stoppedByIdle(id string) types.Instance {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		in := e.instanceNow(id)
		return in.State == types.StateStopped && in.Reason == envd.ReasonIdle
	}, 20*time.Second, 50*time.Millisecond, "the idle reaper stops the instance")
	return e.getInstance(id)
}

// Idle stop as a user sees it: activity and open sessions keep an
// instance; an idle one is saved (unless retained with action stop) and
// stopped; a wake brings it back with its files.
func TestCoreIdle(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)

	t.Run("activity keeps an instance running", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("busy", "")
		in := e.instance("busy", types.CreateInstanceRequest{})
		got := e.getInstance(in.ID)
		assert.Equal(t, idleAfter.String(), got.IdleAfter)
		assert.Equal(t, types.IdleActionHibernate, got.IdleAction, "not retained: saved before it stops, whatever the setting")
		require.NotNil(t, got.IdleSince)
		require.NotNil(t, got.IdleActionAt)
		assert.Equal(t, got.IdleSince.Add(idleAfter), *got.IdleActionAt)
		for end := time.Now().Add(2 * idleAfter); time.Now().Before(end); time.Sleep(idleAfter / 4) {
			_, err := e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"true"}})
			require.NoError(t, err)
		}
		got = e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State, "exec every half second is activity")
		require.NotNil(t, got.IdleSince)
		assert.WithinDuration(t, time.Now(), *got.IdleSince, idleAfter/2)
		assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("busy"))
	})

	t.Run("a session held by another route (SSH, port-forward) keeps an instance running", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("held", "")
		in := e.instance("held", types.CreateInstanceRequest{})
		release := e.svc.Parts().Instances.HoldInstance(in.ID)
		time.Sleep(2 * idleAfter)
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State)
		assert.Equal(t, 1, got.ActiveSessions)
		release()
		release() // twice is harmless
		assert.Zero(t, e.getInstance(in.ID).ActiveSessions)
		e.stoppedByIdle(in.ID)
	})

	t.Run("activity another node flushed keeps an instance running", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("remote", "")
		in := e.instance("remote", types.CreateInstanceRequest{})
		for end := time.Now().Add(2 * idleAfter); time.Now().Before(end); time.Sleep(idleAfter / 4) {
			// What another node's flush writes after a proxied request.
			require.NoError(t, e.store.Instances.RecordActivity(e.ctx, map[string]time.Time{in.ID: time.Now()}))
		}
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State)
		require.NotNil(t, got.IdleSince)
		assert.WithinDuration(t, time.Now(), *got.IdleSince, idleAfter/2)
		require.NoError(t, e.store.Instances.RecordActivity(e.ctx, map[string]time.Time{in.ID: time.Now().Add(-time.Hour)}))
		assert.Equal(t, *got.IdleSince, *e.getInstance(in.ID).IdleSince, "an older flush never moves the clock back")
		e.stoppedByIdle(in.ID)
	})

	t.Run("an open terminal keeps an instance running; input is activity", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("term", "")
		in := e.instance("term", types.CreateInstanceRequest{})
		stdinR, stdinW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			// The fake's process reads stdin to its end: a terminal left
			// open with nothing typed.
			_, err := e.svc.Parts().Instances.ExecStream(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"top"}},
				types.Stdio{Stdin: stdinR, Stdout: io.Discard, Stderr: io.Discard})
			done <- err
		}()
		require.Eventually(t, func() bool { return e.instanceNow(in.ID).ActiveSessions == 1 }, 5*time.Second, 20*time.Millisecond)
		time.Sleep(2 * idleAfter)
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State, "an open session is use, with no input")
		assert.Equal(t, 1, got.ActiveSessions)
		assert.Nil(t, got.IdleActionAt, "no idle action while a session is open")

		_, err := stdinW.Write([]byte("q"))
		require.NoError(t, err)
		require.NoError(t, stdinW.Close())
		require.NoError(t, <-done)
		got = e.getInstance(in.ID)
		assert.Zero(t, got.ActiveSessions)
		require.NotNil(t, got.IdleSince, "the clock starts when the session ends")
		assert.WithinDuration(t, time.Now(), *got.IdleSince, idleAfter/2)
		e.stoppedByIdle(in.ID)
	})

	t.Run("an idle instance that is not retained is saved as a non-current version, then stopped; a wake brings it back", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("lazy", types.IdleActionStop) // stop cannot keep a layer that is not retained: it hibernates
		in := e.instance("lazy", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/work.txt", "unsaved work")
		got := e.stoppedByIdle(in.ID)
		assert.Equal(t, 2, got.HibernatedVersion)
		assert.Contains(t, got.Message, "saved as version 2")
		assert.Nil(t, got.IdleActionAt)
		assert.Equal(t, []string{"1:ready:current", "2:ready"}, e.versionsOf("lazy"), "the idle version does not become current")
		assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/work.txt": "unsaved work"}, e.layerFiles("lazy", 2))
		v2, err := e.svc.GetVersion(e.ctx, e.user, "lazy", 2)
		require.NoError(t, err)
		assert.Contains(t, v2.Message, "idle stop of instance "+in.ID)
		assert.Empty(t, e.rt.UpperDir(in.ID), "the layer on the node is freed")
		assert.Empty(t, e.workDirEntries())

		woke, err := e.svc.Parts().Instances.WakeInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, woke.State)
		assert.Zero(t, woke.HibernatedVersion)
		assert.Equal(t, in.Generation+1, woke.Generation)
		spec, ok := e.rt.Spec(in.ID)
		require.True(t, ok)
		assert.Equal(t, e.reg.Addr()+"/"+v2.Image, spec.Image, "from the idle version")
	})

	t.Run("a retained instance with action stop keeps its layer on the node", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("kept", types.IdleActionStop)
		in := e.instance("kept", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/kept", "kept")
		got := e.stoppedByIdle(in.ID)
		assert.Zero(t, got.HibernatedVersion)
		assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("kept"), "nothing saved")
		assert.Empty(t, e.task(in.ID), "no task")
		b, err := os.ReadFile(filepath.Join(e.rt.UpperDir(in.ID), "home/dev/kept"))
		require.NoError(t, err)
		assert.Equal(t, "kept", string(b))

		res, err := e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"true"}, Wake: true})
		require.NoError(t, err)
		assert.Zero(t, res.ExitCode)
		assert.Equal(t, types.StateRunning, e.getInstance(in.ID).State, "exec with wake started it")
	})

	t.Run("a retained instance with action hibernate is saved, stopped and freed", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("deep", types.IdleActionHibernate)
		in := e.instance("deep", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/deep", "deep")
		got := e.stoppedByIdle(in.ID)
		assert.Equal(t, 2, got.HibernatedVersion)
		assert.Equal(t, []string{"1:ready:current", "2:ready"}, e.versionsOf("deep"))
		assert.Equal(t, "deep", e.layerFiles("deep", 2)["home/dev/deep"])
		assert.Empty(t, e.rt.UpperDir(in.ID))
	})

	t.Run("a paused instance is not idle", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("frozen", "")
		in := e.instance("frozen", types.CreateInstanceRequest{})
		_, err := e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		time.Sleep(2 * idleAfter)
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StatePaused, got.State)
		assert.Nil(t, got.IdleActionAt)
		_, err = e.svc.Parts().Instances.WakeInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a wake does not resume what its user paused")
	})
}

// What the tenant's maximum allows, and what applies without a setting.
func TestCoreIdleSettings(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)
	e.project("web")
	_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{MaxIdleAfter: "1h"})
	require.NoError(t, err)
	u, err := e.svc.Usage(e.ctx, e.user, "")
	require.NoError(t, err)
	assert.Equal(t, "1h0m0s", u.Quota.MaxIdleAfter)

	for _, tc := range []struct {
		name string
		req  types.IdleSetting
		want string // "" = accepted
	}{
		{"above the maximum", types.IdleSetting{After: "2h"}, "above the tenant's maximum of 1h0m0s"},
		{"never under a maximum", types.IdleSetting{After: "0"}, "above the tenant's maximum"},
		{"not a duration", types.IdleSetting{After: "soon"}, "a Go duration"},
		{"too short", types.IdleSetting{After: "10ms"}, "at least 1s"},
		{"an unknown action", types.IdleSetting{After: "30m", Action: "delete"}, "must be stop, hibernate or hibernate-memory"},
		{"within the maximum", types.IdleSetting{After: "30m0s", Action: "hibernate"}, ""},
		{"the node's default", types.IdleSetting{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := e.svc.SetProjectIdle(e.ctx, e.user, "web", tc.req)
			if tc.want != "" {
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				assert.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			if tc.req == (types.IdleSetting{}) {
				assert.Nil(t, p.Idle)
			} else {
				assert.Equal(t, &tc.req, p.Idle)
			}
		})
	}
	ps, err := e.svc.ListProjects(e.ctx, e.user)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Nil(t, ps[0].Idle, "the last setting was the node's default")
	_, err = e.svc.SetProjectIdle(e.ctx, e.user, "web", types.IdleSetting{After: "20m"})
	require.NoError(t, err)
	ps, err = e.svc.ListProjects(e.ctx, e.user)
	require.NoError(t, err)
	assert.Equal(t, &types.IdleSetting{After: "20m0s"}, ps[0].Idle, "listed too")
	_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "big", Base: baseImage, Idle: &types.IdleSetting{After: "3h"}}, "")
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "create checks it too")
	assert.Equal(t, "1h0m0s", errdefs.Details(err)["max_idle_after"])
	_, err = e.svc.GetProject(e.ctx, e.user, "big")
	require.ErrorIs(t, err, errdefs.ErrNotFound, "nothing was made")

	// The node's default is off; the tenant's maximum applies to projects
	// without a setting.
	_, err = e.svc.SetProjectIdle(e.ctx, e.user, "web", types.IdleSetting{})
	require.NoError(t, err)
	in := e.instance("web", types.CreateInstanceRequest{})
	got := e.getInstance(in.ID)
	assert.Equal(t, "1h0m0s", got.IdleAfter)
	require.NotNil(t, got.IdleActionAt)
	assert.WithinDuration(t, time.Now().Add(time.Hour), *got.IdleActionAt, time.Minute)
}

// An idle action that fails (quota, registry) leaves the instance running
// and says so; a later one succeeds. Wakes: once for concurrent callers,
// 503 waking for one that does not wait.
func TestCoreIdleFailuresAndWake(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)
	e.idleProject("web", types.IdleActionHibernate)
	_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{MaxVersions: 1})
	require.NoError(t, err)

	in := e.instance("web", types.CreateInstanceRequest{})
	e.write(in.ID, "home/dev/work", "work")
	blobs := e.registryBlobs()
	require.Eventually(t, func() bool { return e.instanceNow(in.ID).Reason == envd.ReasonIdleFailed }, 20*time.Second, 50*time.Millisecond)
	got := e.getInstance(in.ID)
	assert.Equal(t, types.StateRunning, got.State, "a refused save leaves it running")
	assert.Contains(t, got.Message, "quota exceeded")
	assert.Equal(t, "running", e.task(in.ID), "thawed")
	assert.Equal(t, blobs, e.registryBlobs(), "refused before the upload")
	assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("web"))
	require.NotNil(t, got.IdleActionAt, "tried again one idle setting later")
	assert.WithinDuration(t, got.LastTransitionAt.Add(idleAfter), *got.IdleActionAt, time.Second)

	// The registry down: same.
	_, err = e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{})
	require.NoError(t, err)
	e.reg.failNextAppend(errors.New("registry: connection refused"))
	require.Eventually(t, func() bool {
		got := e.instanceNow(in.ID)
		return got.Reason == envd.ReasonIdleFailed && assert.ObjectsAreEqual(types.StateRunning, got.State) &&
			strings.Contains(got.Message, "connection refused")
	}, 20*time.Second, 50*time.Millisecond)
	b, err := os.ReadFile(filepath.Join(e.rt.UpperDir(in.ID), "home/dev/work"))
	require.NoError(t, err, "the layer is kept")
	assert.Equal(t, "work", string(b))

	// Then it works.
	got = e.stoppedByIdle(in.ID)
	require.Equal(t, 2, got.HibernatedVersion)

	// A wake that does not wait: 503 waking with a Retry-After, and the
	// start goes on; concurrent wakes start it once.
	gate := make(chan struct{})
	e.rt.SetFault(fakeruntime.Pull, func(ctx context.Context, _ string) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	_, err = e.svc.Parts().Instances.WakeInstance(types.WithWakeWait(e.ctx, 0), e.user, in.ID)
	require.ErrorIs(t, err, errdefs.ErrWaking)
	var ra interface{ RetryAfter() time.Duration }
	require.ErrorAs(t, err, &ra)
	assert.Positive(t, ra.RetryAfter())
	require.Eventually(t, func() bool { return e.instanceNow(in.ID).State == types.StatePending }, 5*time.Second, 10*time.Millisecond,
		"the wake goes on without its caller")

	var wg sync.WaitGroup
	woken := make([]types.Instance, 3)
	errs := make([]error, 3)
	for i := range woken {
		wg.Add(1)
		go func() {
			defer wg.Done()
			woken[i], errs[i] = e.svc.Parts().Instances.WakeInstance(e.ctx, e.user, in.ID)
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(gate)
	wg.Wait()
	e.rt.SetFault(fakeruntime.Pull, nil)
	for i := range woken {
		require.NoError(t, errs[i])
		assert.Equal(t, types.StateRunning, woken[i].State)
		assert.Equal(t, in.Generation+1, woken[i].Generation, "started once")
	}
	assert.Equal(t, "work", e.layerFiles("web", 2)["home/dev/work"])
}

// Activity during the idle save cancels it: the instance keeps running and
// nothing is saved; the next idle period stops it.
func TestCoreIdleActivityCancelsTheSave(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)
	e.idleProject("web", "")
	reading := make(chan struct{}, 1)
	e.rt.SetFault(fakeruntime.Mounts, func(ctx context.Context, _ string) error {
		select { // the save is reading the layer, the instance frozen
		case reading <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	})
	in := e.instance("web", types.CreateInstanceRequest{})
	e.write(in.ID, "home/dev/work", "work")
	select {
	case <-reading:
	case <-time.After(20 * time.Second):
		t.Fatal("the idle save did not start")
	}
	assert.Equal(t, "paused", e.task(in.ID), "frozen for the read")
	res, err := e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"true"}})
	require.NoError(t, err, "the exec waits out the freeze, whose save it cancels")
	assert.Zero(t, res.ExitCode)
	e.rt.SetFault(fakeruntime.Mounts, nil)
	got := e.getInstance(in.ID)
	assert.Equal(t, types.StateRunning, got.State)
	assert.Equal(t, "running", e.task(in.ID))
	assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("web"), "nothing saved")
	assert.Empty(t, e.workDirEntries())

	got = e.stoppedByIdle(in.ID)
	assert.Equal(t, 2, got.HibernatedVersion)
}

// A project and its idle setting are created in one transaction: when the
// setting cannot be written, no project is left behind and the name is
// free for the next try.
func TestCoreCreateProjectWithIdleIsOneTransaction(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)
	// A real failure of the second write: the database refuses any idle
	// setting of project "web".
	_, err := e.store.Pool().Exec(e.ctx, `CREATE FUNCTION refuse_idle() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'idle settings refused' USING ERRCODE = '23514'; END $$;
		CREATE TRIGGER refuse_idle BEFORE UPDATE OF idle_after_s ON projects
		FOR EACH ROW WHEN (NEW.name = 'web') EXECUTE FUNCTION refuse_idle()`)
	require.NoError(t, err)

	req := types.CreateProjectRequest{Name: "web", Base: baseImage, Idle: &types.IdleSetting{After: "30m"}}
	_, err = e.svc.CreateProject(e.ctx, e.user, req, "")
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	assert.ErrorContains(t, err, "idle settings refused")
	_, err = e.svc.GetProject(e.ctx, e.user, "web")
	require.ErrorIs(t, err, errdefs.ErrNotFound, "no project without its idle setting")
	ps, err := e.svc.ListProjects(e.ctx, e.user)
	require.NoError(t, err)
	assert.Empty(t, ps)

	_, err = e.store.Pool().Exec(e.ctx, `DROP TRIGGER refuse_idle ON projects`)
	require.NoError(t, err)
	p, err := e.svc.CreateProject(e.ctx, e.user, req, "")
	require.NoError(t, err, "the name is free")
	assert.Equal(t, &types.IdleSetting{After: "30m0s"}, p.Idle)
}
