package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// FindFIFOs lists the FIFOs of a tree by their paths from its root,
// leaving out the mount points it is told of and /proc, /sys, /dev.
func TestFindFIFOs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"data/deep", "vol", "proc", "dev", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, f := range []string{"data/fifo", "data/deep/f2", "vol/in-volume", "proc/p", "dev/d"} {
		require.NoError(t, unix.Mkfifo(filepath.Join(root, f), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/plain"), nil, 0o644))
	require.NoError(t, os.Symlink("/data/fifo", filepath.Join(root, "etc/link")))

	got, err := FindFIFOs(root, map[string]bool{"/vol": true})
	require.NoError(t, err)
	assert.Equal(t, []string{"/data/deep/f2", "/data/fifo"}, got)

	none, err := FindFIFOs(filepath.Join(root, "etc"), nil)
	require.NoError(t, err)
	assert.Equal(t, []string{}, none, "an empty list, not null")
}

func TestUnescapeMount(t *testing.T) {
	assert.Equal(t, "/a b", unescapeMount(`/a\040b`))
	assert.Equal(t, `/a\9`, unescapeMount(`/a\9`))
	assert.Equal(t, "/plain", unescapeMount("/plain"))
}

func TestMountPoints(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(f, []byte("1 0 0:1 / / rw - overlay overlay rw\n2 1 0:2 / /work\\040dir rw - ext4 x rw\n"), 0o644))
	m, err := mountPoints(f)
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"/work dir": true}, m)
}

// BenchmarkFindFIFOs walks a tree of 100,000 files in 1,000 directories
// with one FIFO, as `envd-agent fifos` does before each save and stop of
// a gVisor instance; here on the node's kernel (the figure inside gVisor,
// through its gofer, is in docs/gvisor.md).
//
//	go test -run '^$' -bench BenchmarkFindFIFOs -benchtime 10x ./runtime/agent/
func BenchmarkFindFIFOs(b *testing.B) {
	root := b.TempDir()
	for d := range 1000 {
		dir := filepath.Join(root, "d"+strconv.Itoa(d/100), "e"+strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "d3", "e300", "pipe"), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		found, err := FindFIFOs(root, nil)
		if err != nil || len(found) != 1 || found[0] != "/d3/e300/pipe" {
			b.Fatalf("found %v, %v", found, err)
		}
	}
	b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "files/s")
}
