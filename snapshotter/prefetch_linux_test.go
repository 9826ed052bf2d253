package snapshotter

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/snapshotter/prefetch"
)

// TestRootEstargzPrioritizedFromRecord records the files a process reads
// through an overlay mount, saves the overlay's content with the recorded list
// as PrioritizedFiles, and checks that the eStargz TOC lists exactly those
// files, in that order, ahead of the prefetch landmark and everything else.
func TestRootEstargzPrioritizedFromRecord(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{upper, work, merged} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	buildLower(t, lower)
	mountOverlay(t, lower, upper, work, merged)

	rec, err := prefetch.Start(merged, 1000)
	require.NoError(t, err)
	defer rec.Close()
	read := []string{"usr/bin/tool", "var/data/sub/deep.txt", "run/base.pid", "etc/hosts"}
	for _, name := range read {
		require.NoError(t, exec.Command("cat", filepath.Join(merged, name)).Run())
	}
	recorded, err := rec.Collect(ctx, 0)
	require.NoError(t, err)
	prioritized := prefetch.Prioritize(recorded)
	require.Equal(t, []string{"/usr/bin/tool", "/var/data/sub/deep.txt", "/etc/hosts"}, prioritized,
		"recorded %q", recorded)

	// The lower dir stands for the layer being saved.
	spoolPath := filepath.Join(dir, "spool.tar")
	f, err := os.Create(spoolPath)
	require.NoError(t, err)
	_, err = Spool(ctx, lower, f, SpoolOptions{Excludes: DefaultExcludes})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	outDir := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(outDir, 0o755))
	layer, err := Encode(ctx, spoolPath, outDir, EncodeOptions{Compression: Estargz, PrioritizedFiles: prioritized})
	require.NoError(t, err)
	checkLayer(t, layer, Estargz, spoolPath)

	blob, err := os.ReadFile(layer.Path)
	require.NoError(t, err)
	er, err := estargz.Open(io.NewSectionReader(bytes.NewReader(blob), 0, int64(len(blob))))
	require.NoError(t, err)
	_, err = er.VerifyTOC(er.TOCDigest())
	require.NoError(t, err)
	// Regular files in TOC (= blob) order: the prioritized ones, then the
	// landmark; their parent directories come along, before them.
	var files []string
	walkTOC(t, er, &files)
	require.GreaterOrEqual(t, len(files), 4)
	assert.Equal(t, []string{"usr/bin/tool", "var/data/sub/deep.txt", "etc/hosts", estargz.PrefetchLandmark}, files[:4])
}

// walkTOC lists the non-empty regular files of an eStargz blob in blob
// order, by the offsets the TOC gives their payloads.
func walkTOC(t *testing.T, er *estargz.Reader, files *[]string) {
	t.Helper()
	type reg struct {
		name string
		off  int64
	}
	var regs []reg
	var walk func(dir *estargz.TOCEntry)
	walk = func(dir *estargz.TOCEntry) {
		dir.ForeachChild(func(_ string, e *estargz.TOCEntry) bool {
			switch e.Type {
			case "dir":
				walk(e)
			case "reg":
				if e.Size == 0 {
					return true // no payload, no offset
				}
				regs = append(regs, reg{e.Name, e.Offset})
			}
			return true
		})
	}
	root, ok := er.Lookup("")
	require.True(t, ok)
	walk(root)
	slices.SortFunc(regs, func(a, b reg) int { return cmp.Compare(a.off, b.off) })
	for _, r := range regs {
		*files = append(*files, r.name)
	}
}
