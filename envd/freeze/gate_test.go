package freeze

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/runtime"
)

// fakeFreezer is a task's cgroup freezer whose Pause can be made to fail:
// the one failure a real runtime cannot be made to show on demand (a Pause
// that fails, having frozen the task or not). The e2e suite covers the
// rest with containerd.
type fakeFreezer struct {
	mu       sync.Mutex
	paused   bool
	pauseErr error // returned by Pause
	freezes  bool  // a failing Pause still freezes (as a canceled one may)
	pauses   int
	resumes  int
	// resuming, when set, receives once a Resume has begun, which then
	// waits for a receive from thaw.
	resuming chan struct{}
	thaw     chan struct{}
}

func (f *fakeFreezer) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses++
	if f.pauseErr != nil {
		f.paused = f.paused || f.freezes
		return f.pauseErr
	}
	f.paused = true
	return nil
}

func (f *fakeFreezer) Resume(ctx context.Context, id string) error {
	if f.resuming != nil {
		f.resuming <- struct{}{}
		<-f.thaw
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumes++
	f.paused = false
	return nil
}

func (f *fakeFreezer) Status(ctx context.Context, id string) (runtime.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := runtime.Status{Exists: true, Task: "running"}
	if f.paused {
		st.Task = "paused"
	}
	return st, nil
}

func (f *fakeFreezer) isPaused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused
}

var errFreeze = errors.New("freezer: device or resource busy")

func TestFreezeGateFailedFreeze(t *testing.T) {
	for _, tc := range []struct {
		name        string
		freezes     bool // the failing Pause froze the task anyway
		wantPaused  bool
		wantResumes int
	}{
		{name: "failed freeze that froze nothing is not thawed", wantPaused: false, wantResumes: 0},
		{name: "failed freeze that froze the task thaws it", freezes: true, wantPaused: false, wantResumes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var g Gate
			f := &fakeFreezer{pauseErr: errFreeze, freezes: tc.freezes}
			err := g.Hold(ctx, f, "i", SaveHolder("op-1"))
			require.ErrorIs(t, err, errFreeze)
			assert.Equal(t, tc.wantPaused, f.isPaused())
			assert.Equal(t, tc.wantResumes, f.resumes)
			require.NoError(t, g.WaitThawed(ctx, "i"), "a failed hold leaves no holder")
		})
	}
}

// A task someone else froze (outside the gate) is never thawed by a save:
// not by its release, not by a failed freeze.
func TestFreezeGateForeignFreeze(t *testing.T) {
	ctx := context.Background()
	var g Gate
	f := &fakeFreezer{paused: true, pauseErr: errFreeze, freezes: true}
	require.NoError(t, g.Hold(ctx, f, "i", SaveHolder("op-1")), "already frozen: nothing to do")
	assert.Zero(t, f.pauses)
	require.NoError(t, g.Release(ctx, f, "i", SaveHolder("op-1"), false))
	assert.True(t, f.isPaused(), "left frozen as found")
	assert.Zero(t, f.resumes)

	// The user's resume thaws it whoever froze it.
	require.NoError(t, g.Release(ctx, f, "i", HolderUser, true))
	assert.False(t, f.isPaused())
}

// A user's pause during a save outlives the save's freeze window; a save's
// freeze during a user's pause does not thaw it.
func TestFreezeGateUserPauseAndSave(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		order []string // "hold:H" / "release:H", H = user or save
	}{
		{"pause during the freeze window", []string{"hold:save", "hold:user", "release:save"}},
		{"pause before the freeze window", []string{"hold:user", "hold:save", "release:save"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Gate
			f := &fakeFreezer{}
			for _, step := range tc.order {
				holder := SaveHolder("op-1")
				if step[len(step)-4:] == "user" {
					holder = HolderUser
				}
				if step[:4] == "hold" {
					require.NoError(t, g.Hold(ctx, f, "i", holder))
				} else {
					require.NoError(t, g.Release(ctx, f, "i", holder, holder == HolderUser))
				}
			}
			assert.True(t, f.isPaused(), "the user's pause is in force")
			assert.Equal(t, 1, f.pauses, "frozen once")
			assert.Zero(t, f.resumes)
			require.NoError(t, g.Wait(ctx, "i"), "execs do not wait for a user's pause")
			require.NoError(t, g.Release(ctx, f, "i", HolderUser, true))
			assert.False(t, f.isPaused())
		})
	}
}

// A user's resume during a save's freeze window returns only after the
// save's thaw.
func TestFreezeGateResumeWaitsForSave(t *testing.T) {
	ctx := context.Background()
	var g Gate
	f := &fakeFreezer{}
	require.NoError(t, g.Hold(ctx, f, "i", HolderUser))
	require.NoError(t, g.Hold(ctx, f, "i", SaveHolder("op-1")))
	resumed := make(chan error, 1)
	go func() {
		if err := g.Release(ctx, f, "i", HolderUser, true); err != nil {
			resumed <- err
			return
		}
		resumed <- g.WaitThawed(ctx, "i")
	}()
	select {
	case err := <-resumed:
		t.Fatalf("resume returned during the save's freeze window: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	assert.True(t, f.isPaused(), "still frozen for the save")
	require.NoError(t, g.Release(ctx, f, "i", SaveHolder("op-1"), false))
	select {
	case err := <-resumed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("resume did not return after the save's thaw")
	}
	assert.False(t, f.isPaused())
	assert.Equal(t, 1, f.resumes)
}

// A save that asks to freeze while the user's resume is thawing (it waits
// for the gate) freezes the task right after: the resume returns only after
// that save's thaw, never with the task frozen again behind it.
func TestFreezeGateResumeWaitsForSaveAboutToFreeze(t *testing.T) {
	ctx := context.Background()
	var g Gate
	f := &fakeFreezer{resuming: make(chan struct{}), thaw: make(chan struct{})}
	require.NoError(t, g.Hold(ctx, f, "i", HolderUser))
	resumed := make(chan error, 1)
	go func() {
		if err := g.Release(ctx, f, "i", HolderUser, true); err != nil {
			resumed <- err
			return
		}
		resumed <- g.WaitThawed(ctx, "i")
	}()
	<-f.resuming // the user's thaw is under way
	held := make(chan error, 1)
	go func() { held <- g.Hold(ctx, f, "i", SaveHolder("op-1")) }()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.instances["i"].claims == 1
	}, 10*time.Second, time.Millisecond, "the save asks to freeze")
	f.thaw <- struct{}{}
	require.NoError(t, <-held)
	assert.True(t, f.isPaused(), "frozen for the save")
	select {
	case err := <-resumed:
		t.Fatalf("resume returned during the save's freeze window: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	go func() { <-f.resuming; f.thaw <- struct{}{} }()
	require.NoError(t, g.Release(ctx, f, "i", SaveHolder("op-1"), false))
	select {
	case err := <-resumed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("resume did not return after the save's thaw")
	}
	assert.False(t, f.isPaused())
	assert.Equal(t, 2, f.resumes)
}

func TestFreezeGateCaptureClaim(t *testing.T) {
	var g Gate
	release, err := g.ClaimCapture("i", "op-1")
	require.NoError(t, err)
	_, err = g.ClaimCapture("i", "hibernation")
	require.Error(t, err)
	_, err = g.ClaimCapture("j", "hibernation")
	require.NoError(t, err, "another instance")
	release()
	_, err = g.ClaimCapture("i", "hibernation")
	require.NoError(t, err)
}

// Holders of a task that is no longer frozen (stopped and started again
// while paused) are stale: a save freezes it for itself, and thaws it.
func TestFreezeGateStaleHolders(t *testing.T) {
	ctx := context.Background()
	var g Gate
	f := &fakeFreezer{}
	require.NoError(t, g.Hold(ctx, f, "i", HolderUser))
	f.mu.Lock()
	f.paused = false // a new task
	f.mu.Unlock()
	require.NoError(t, g.Hold(ctx, f, "i", SaveHolder("op-1")))
	assert.True(t, f.isPaused(), "the save froze the new task")
	assert.Equal(t, 2, f.pauses)
	require.NoError(t, g.Release(ctx, f, "i", SaveHolder("op-1"), false))
	assert.False(t, f.isPaused(), "and thawed it: the old pause does not hold it")
}
