package envd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/snapshotter"
)

// A save reads large files in place after the thaw (snapshotter's "Held
// files"). One rewritten right after the thaw has lost its frozen content:
// the save captures again, copying every file, and the version holds what
// the second freeze saw, never a mix.
func TestCoreSaveHeldFileChangedAfterThaw(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("held")
	in := e.instance("held", types.CreateInstanceRequest{})
	before := strings.Repeat("frozen ", snapshotter.HeldMinSize/7+1)
	after := strings.Repeat("thawed ", snapshotter.HeldMinSize/7+1)
	e.write(in.ID, "home/dev/big.log", before)
	e.write(in.ID, "home/dev/small.txt", "small")
	time.Sleep(2 * snapshotter.TornMargin) // old enough to be held

	var once sync.Once
	e.rt.SetFault(fakeruntime.Resume, func(ctx context.Context, id string) error {
		once.Do(func() { // the instance writes as soon as it is thawed
			assert.NoError(t, os.WriteFile(filepath.Join(e.rt.UpperDir(id), "home/dev/big.log"), []byte(after), 0o644))
		})
		return nil
	})
	defer e.rt.SetFault(fakeruntime.Resume, nil)

	op := e.save(in.ID, types.SaveRequest{})
	require.Equal(t, types.OpSucceeded, op.State, "save failed: %+v", op.Error)
	assert.Equal(t, append([]string{"spooled"}, savedEvents...), e.eventTypes(e.user, op.ID), "spooled twice")
	assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/big.log": after, "home/dev/small.txt": "small"},
		e.layerFiles("held", 2))

	// Nothing changed after the thaw: one pass, the held file's content.
	e.write(in.ID, "home/dev/small.txt", "again")
	time.Sleep(2 * snapshotter.TornMargin)
	op = e.save(in.ID, types.SaveRequest{})
	require.Equal(t, types.OpSucceeded, op.State, "save failed: %+v", op.Error)
	assert.Equal(t, savedEvents, e.eventTypes(e.user, op.ID))
	assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/big.log": after, "home/dev/small.txt": "again"},
		e.layerFiles("held", 3))
}
