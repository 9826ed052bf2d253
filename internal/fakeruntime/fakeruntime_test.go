package fakeruntime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
)

// The fake keeps the contracts of the real runtime that envd's core relies
// on, and its mounts read like containerd's.
func TestRuntime(t *testing.T) {
	ctx := context.Background()
	rt := fakeruntime.New(t.TempDir())
	spec := runtime.InstanceSpec{ID: "web-1", Image: "reg/x@sha256:00", Labels: map[string]string{"a": "1"}}
	require.NoError(t, rt.Create(ctx, spec))
	assert.ErrorIs(t, rt.Create(ctx, spec), errdefs.ErrAlreadyExists)

	mounts, err := rt.Mounts(ctx, "web-1")
	require.NoError(t, err)
	upper, err := snapshotter.UpperDir(mounts)
	require.NoError(t, err)
	assert.Equal(t, rt.UpperDir("web-1"), upper, "the save path finds the upper dir")
	assert.DirExists(t, upper)

	task := func() string {
		st, err := rt.Status(ctx, "web-1")
		require.NoError(t, err)
		require.True(t, st.Exists)
		return st.Task
	}
	steps := []struct {
		name string
		do   func(context.Context, string) error
		want error
		task string
	}{
		{"pause", rt.Pause, nil, "paused"},
		{"pause again", rt.Pause, errdefs.ErrFailedPrecondition, "paused"},
		{"start while paused", rt.Start, errdefs.ErrFailedPrecondition, "paused"},
		{"resume", rt.Resume, nil, "running"},
		{"resume again", rt.Resume, errdefs.ErrFailedPrecondition, "running"},
		{"stop", rt.Stop, nil, ""},
		{"stop again", rt.Stop, nil, ""},
		{"pause stopped", rt.Pause, errdefs.ErrFailedPrecondition, ""},
		{"start", rt.Start, nil, "running"},
		{"start running", rt.Start, nil, "running"},
	}
	for _, s := range steps {
		err := s.do(ctx, "web-1")
		if s.want == nil {
			assert.NoError(t, err, s.name)
		} else {
			assert.ErrorIs(t, err, s.want, s.name)
		}
		assert.Equal(t, s.task, task(), s.name)
	}

	require.NoError(t, rt.SetLabels(ctx, "web-1", map[string]string{"b": "2"}))
	st, err := rt.Status(ctx, "web-1")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, st.Labels)

	boom := errors.New("boom")
	rt.FailNext(fakeruntime.Pause, boom)
	assert.ErrorIs(t, rt.Pause(ctx, "web-1"), boom)
	assert.Equal(t, "running", task(), "a failed call changes nothing")
	require.NoError(t, rt.Pause(ctx, "web-1"), "FailNext fails one call")

	require.NoError(t, rt.Remove(ctx, "web-1"))
	assert.NoDirExists(t, upper)
	require.NoError(t, rt.Remove(ctx, "web-1"), "removing an unknown instance is not an error")
	st, err = rt.Status(ctx, "web-1")
	require.NoError(t, err)
	assert.False(t, st.Exists)
	_, err = rt.Mounts(ctx, "web-1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.ErrorIs(t, rt.Pause(ctx, "web-1"), errdefs.ErrNotFound)
}
