package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKBField(t *testing.T) {
	p := filepath.Join(t.TempDir(), "smaps_rollup")
	require.NoError(t, os.WriteFile(p, []byte("Rss:                2048 kB\nPss:                1024 kB\nPss_Anon:            512 kB\n"), 0o644))
	for _, tc := range []struct {
		name, field string
		want        int64
	}{
		{"exact field, not its prefix", "Pss", 1024 << 10},
		{"another", "Pss_Anon", 512 << 10},
		{"missing", "Swap", 0},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, kbField(p, tc.field)) })
	}
	assert.Equal(t, int64(0), kbField(filepath.Join(t.TempDir(), "gone"), "Pss"))
}

func TestPPIDOfThisProcess(t *testing.T) {
	assert.Equal(t, os.Getppid(), ppid(os.Getpid()))
	assert.Positive(t, pss(os.Getpid()))
}

func TestParallel(t *testing.T) {
	var running, most atomic.Int32
	err := parallel(context.Background(), 20, 4, func(i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		if i == 7 {
			return errors.New("seven")
		}
		return nil
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "#7: seven")
	assert.LessOrEqual(t, most.Load(), int32(4))
}

func TestRatioAndMilliseconds(t *testing.T) {
	assert.Equal(t, "1.50×", ratioX(150*time.Millisecond, 100*time.Millisecond))
	assert.Equal(t, "—", ratioX(0, time.Second))
	assert.Equal(t, "—", ratioX(time.Second, 0))
	assert.Equal(t, "235 ms", msf(235*time.Millisecond))
	assert.Equal(t, "—", msf(0))
}

func TestLatencySide(t *testing.T) {
	var s latencySide
	s.add(latExec, time.Millisecond)
	s.add(latExec, 3*time.Millisecond)
	assert.Equal(t, 2*time.Millisecond, median(s.samples[latExec]))
	assert.Empty(t, s.samples[latSave])
}
