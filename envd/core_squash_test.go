package envd_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
)

// A project saved past the squash depth: its current version is squashed
// to its base's layers plus one with the same files, saves on it stay
// flat, and the image before the squash stays while an instance started
// from it lives, then goes at the next GC.
func TestCoreSquash(t *testing.T) {
	t.Parallel()
	// The squash's log goes to the test's: a squash that failed says why.
	e := newCoreEnv(t, func(c *envd.Config) {
		c.SquashAfter, c.SquashInterval = 4, 50*time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	e.project("deep")

	// Six saves, each from an instance of the last: six layers over the
	// base's one. f1 is rewritten by the third.
	var last types.SaveResult
	var keeper types.Instance // started from the version that gets squashed, kept running
	for i := 1; i <= 6; i++ {
		in := e.instance("deep", types.CreateInstanceRequest{})
		e.write(in.ID, fmt.Sprintf("home/f%d", i), fmt.Sprintf("file %d\n", i))
		if i == 3 {
			e.write(in.ID, "home/f1", "rewritten by 3\n")
		}
		last = e.saved(in.ID, types.SaveRequest{})
		if i < 6 {
			_, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
			require.NoError(t, err)
		}
	}
	require.True(t, last.Current)
	keeper = e.instance("deep", types.CreateInstanceRequest{})

	before, err := e.svc.GetVersion(e.ctx, e.user, "deep", last.Version)
	require.NoError(t, err)
	// The squash runs in the background after the save; two minutes, as a
	// save's own wait: at load average 70 in CI it had not ended in 30 s.
	deadline := time.Now().Add(2 * time.Minute)
	var v types.Version
	for {
		v, err = e.svc.GetVersion(e.ctx, e.user, "deep", last.Version)
		require.NoError(t, err)
		if v.Image != before.Image || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NotEqual(t, before.Image, v.Image, "version %d (%d layers) was not squashed", v.Number, v.Layers)
	assert.Equal(t, 2, v.Layers, "the base's layer and one squashed layer")
	assert.Equal(t, map[string]string{
		"home/":   "",
		"home/f1": "rewritten by 3\n", "home/f2": "file 2\n", "home/f3": "file 3\n",
		"home/f4": "file 4\n", "home/f5": "file 5\n", "home/f6": "file 6\n",
	}, e.layerFiles("deep", v.Number))

	// A save on the squashed version adds one layer to it.
	in := e.instance("deep", types.CreateInstanceRequest{})
	e.write(in.ID, "home/f7", "file 7\n")
	next := e.saved(in.ID, types.SaveRequest{})
	nv, err := e.svc.GetVersion(e.ctx, e.user, "deep", next.Version)
	require.NoError(t, err)
	assert.Equal(t, 3, nv.Layers)
	assert.Equal(t, map[string]string{"home/": "", "home/f7": "file 7\n"}, e.layerFiles("deep", next.Version))

	// The pre-squash image stays while keeper (started from it) lives.
	gc := func() {
		t.Helper()
		op, err := e.svc.GC(e.ctx, e.admin, types.GCRequest{}, "")
		require.NoError(t, err)
		require.Equal(t, types.OpSucceeded, e.wait(e.admin, op.ID).State)
	}
	gc()
	_, err = e.reg.Get(e.ctx, before.Image)
	assert.NoError(t, err, "the image an instance was started from must stay")
	_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, keeper.ID)
	require.NoError(t, err)
	_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
	require.NoError(t, err)
	gc()
	_, err = e.reg.Get(e.ctx, before.Image)
	assert.True(t, errors.Is(err, errdefs.ErrNotFound), "the pre-squash image, no longer used, is collected: %v", err)
	_, err = e.reg.Get(e.ctx, v.Image)
	assert.NoError(t, err, "the squashed image stays")
}

// tWriter sends a logger's lines to the test's log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
