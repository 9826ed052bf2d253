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

func TestPlacementCounts(t *testing.T) {
	order := []string{"primary", "b", "c"}
	got := placementCounts(order, []string{"c", "primary", "b", "c", "x", ""})
	assert.Equal(t, []nodeCount{{"primary", 1}, {"b", 1}, {"c", 2}, {"(no node given)", 1}, {"x", 1}}, got,
		"every node in order, then instances on nodes not in order, none dropped")
	assert.Equal(t, "primary 1, b 1, c 2, (no node given) 1, x 1", placementText(got))

	got = placementCounts(order, []string{"primary", "primary"})
	assert.Equal(t, "primary 2, b 0, c 0", placementText(got), "a node that took none shows with 0")
}

func TestMentionsPath(t *testing.T) {
	for _, tc := range []struct {
		cmdline, path string
		want          bool
	}{
		{"containerd --config /w/nodes/cap-node-2/containerd/config.toml", "/w/nodes/cap-node-2", true},
		{"containerd --config /w/nodes/cap-node-20/containerd/config.toml", "/w/nodes/cap-node-2", false},
		{"postgres -D /w/nodes/primary/postgres", "/w/nodes/primary", true},
		{"postgres -D /w/nodes/primary", "/w/nodes/primary", true},
		{"shim -address /w/nodes/cap-node-2/containerd/containerd.sock -id x", "/w/nodes/cap-node-2/containerd/containerd.sock", true},
		{"shim -address /w/nodes/cap-node-2/containerd/containerd.sock.ttrpc", "/w/nodes/cap-node-2/containerd/containerd.sock", false},
		{"x --root=/w/nodes/cap-node-2x /w/nodes/cap-node-2", "/w/nodes/cap-node-2", true},
		{"containerd", "/w/nodes/primary", false},
	} {
		assert.Equal(t, tc.want, mentionsPath(tc.cmdline, tc.path), "%q in %q", tc.path, tc.cmdline)
	}
}
