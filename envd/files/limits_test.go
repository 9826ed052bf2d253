package files

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// osThreads is the process's OS thread count.
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// stalledWriter is a client that reads the first bytes of a download
// and then stops reading: its first Write reports on started, and it
// blocks until release is closed.
type stalledWriter struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	return 0, io.ErrClosedPipe
}

// stalledReader is a client that sends the first part of an upload and
// then nothing: it reports on started when that part is read.
type stalledReader struct {
	head    *bytes.Reader
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (r *stalledReader) Read(b []byte) (int, error) {
	if r.head.Len() > 0 {
		return r.head.Read(b)
	}
	r.once.Do(func() { close(r.started) })
	<-r.release
	return 0, io.ErrUnexpectedEOF
}

// Archive downloads and uploads whose clients stall hold no OS thread:
// many of them at once leave the process's thread count where it was.
// (Before, each held a locked thread for as long as its client stalled,
// and the Go runtime aborts a process at 10,000 threads.)
func TestArchiveStalledClientsHoldNoThread(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	// More than the pipe and buffers between walk and client hold, so that
	// a download's walk is stuck too.
	big := bytes.Repeat([]byte("x"), 4*streamBuffer)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	for i := range 4 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "src", fmt.Sprintf("f%d", i)), big, 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dst"), 0o755))
	var upload bytes.Buffer
	tw := tar.NewWriter(&upload)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "part", Size: int64(len(big)), Mode: 0o644}))
	_, err := tw.Write(big[:len(big)/2]) // the rest never comes
	require.NoError(t, err)

	// A warm-up transfer of each kind, so that the runtime's own threads
	// are counted in the baseline.
	require.NoError(t, r.WriteArchive(ctx, "/src", io.Discard, FormatTar))
	before := osThreads(t)

	const n = 64
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	for i := range n {
		if i%2 == 0 {
			w := &stalledWriter{started: make(chan struct{}), release: release}
			wg.Go(func() { _ = r.WriteArchive(ctx, "/src", w, FormatTar) })
			<-w.started
		} else {
			rd := &stalledReader{head: bytes.NewReader(upload.Bytes()), started: make(chan struct{}), release: release}
			wg.Go(func() { _, _ = r.ExtractArchive(ctx, "/dst", rd, ExtractOptions{}) })
			<-rd.started
		}
	}
	// Every transfer has reached its stalled client; give the walks and
	// extractions time to fill their buffers and block as well.
	require.Eventually(t, func() bool { return osThreads(t) <= before+8 }, 5*time.Second, 50*time.Millisecond,
		"%d stalled transfers: %d OS threads, %d before", n, osThreads(t), before)
	// The root still serves other requests meanwhile.
	got, err := read(t, r, "/etc/secret")
	require.NoError(t, err)
	assert.Equal(t, "instance file", got)
}

// A listing is paged by name: pages of at most the limit, in order, every
// entry once, a token only while there are more; a bad token is refused.
func TestListPages(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	const n = 2500
	want := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("e%05d", i)
		want = append(want, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", name), nil, 0o644))
	}
	want = append(want, "secret")
	sort.Strings(want)

	var got []string
	tok, pages := "", 0
	for {
		l, err := r.List(ctx, "/etc", ListOptions{Limit: 1000, Token: tok})
		require.NoError(t, err)
		pages++
		assert.LessOrEqual(t, len(l.Entries), 1000)
		for _, e := range l.Entries {
			got = append(got, e.Name)
		}
		if l.NextPageToken == "" {
			break
		}
		tok = l.NextPageToken
		if pages == 1 {
			// An entry made between two pages, before the cursor, is not
			// seen and moves no other one.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "a-new"), nil, 0o644))
		}
	}
	assert.Equal(t, 3, pages)
	assert.Equal(t, want, got)

	l, err := r.List(ctx, "/etc", ListOptions{})
	require.NoError(t, err)
	assert.Len(t, l.Entries, MaxPageEntries, "a listing without a limit is capped")
	assert.NotEmpty(t, l.NextPageToken)

	for _, bad := range []ListOptions{{Token: "garbage"}, {Limit: MaxPageEntries + 1}, {Limit: -1}} {
		_, err := r.List(ctx, "/etc", bad)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%+v", bad)
	}

	// A directory read in chunks gives every entry once.
	d, err := r.OpenDir(ctx, "/etc")
	require.NoError(t, err)
	defer d.Close()
	seen := map[string]bool{}
	for {
		chunk, err := d.Next(ctx, 100)
		assert.LessOrEqual(t, len(chunk), 100)
		for _, e := range chunk {
			assert.False(t, seen[e.Name], e.Name)
			seen[e.Name] = true
		}
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	assert.Len(t, seen, n+2)
}

// Watches share one inotify instance: more watches than a user may have
// inotify instances (fs.inotify.max_user_instances, 128 by default) all
// work, from several tenants, and each gets its directory's events.
func TestWatchesShareOneInotifyInstance(t *testing.T) {
	r, dir := tree(t)
	in, err := NewInotify(0, 0)
	require.NoError(t, err)
	defer in.Close()
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	require.NoError(t, err)
	instances, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	n := instances + 32
	require.LessOrEqual(t, n, 4096, "a node with a high max_user_instances: the test would take long")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type watch struct {
		events chan types.FileEvent
		done   chan error
	}
	watches := make([]watch, n)
	for i := range n {
		sub := filepath.Join(dir, "w", strconv.Itoa(i%8))
		require.NoError(t, os.MkdirAll(sub, 0o755))
		w := watch{events: make(chan types.FileEvent, 16), done: make(chan error, 1)}
		watches[i] = w
		key := "tenant-" + strconv.Itoa(i%4)
		go func() {
			w.done <- r.Watch(ctx, in, WatchOptions{Path: "/w/" + strconv.Itoa(i%8), Key: key}, func(ev types.FileEvent) error {
				w.events <- ev
				return nil
			})
		}()
	}
	require.Eventually(t, func() bool {
		total := 0
		for i := range 4 {
			total += in.Watching("tenant-" + strconv.Itoa(i))
		}
		return total == n
	}, 10*time.Second, 20*time.Millisecond, "every watch is set up")
	for i := range 8 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "w", strconv.Itoa(i), "f"), nil, 0o644))
	}
	for i, w := range watches {
		select {
		case ev := <-w.events:
			assert.Equal(t, types.FileEventCreate, ev.Type)
			assert.Equal(t, "/w/"+strconv.Itoa(i%8)+"/f", ev.Path)
		case err := <-w.done:
			t.Fatalf("watch %d ended: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("watch %d: no event", i)
		}
	}
	cancel()
	for _, w := range watches {
		require.NoError(t, <-w.done)
	}
	for i := range 4 {
		assert.Zero(t, in.Watching("tenant-"+strconv.Itoa(i)), "every directory is unwatched at the end")
	}
}

// The directories watched are bounded per key (tenant) and per node, with
// resource_exhausted past either; a watch ending gives its share back,
// and a directory watched twice keeps its other watch when one ends.
func TestWatchLimits(t *testing.T) {
	r, dir := tree(t)
	in, err := NewInotify(3, 4)
	require.NoError(t, err)
	defer in.Close()
	for _, d := range []string{"a/x", "a/y", "b"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	start := func(key, p string, recursive bool) (context.CancelFunc, chan types.FileEvent, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		events, done := make(chan types.FileEvent, 16), make(chan error, 1)
		go func() {
			done <- r.Watch(ctx, in, WatchOptions{Path: p, Key: key, Recursive: recursive}, func(ev types.FileEvent) error {
				events <- ev
				return nil
			})
		}()
		return cancel, events, done
	}
	// Tenant a: /a, /a/x, /a/y: its three.
	stopA, _, doneA := start("a", "/a", true)
	require.Eventually(t, func() bool { return in.Watching("a") == 3 }, 5*time.Second, 10*time.Millisecond)
	_, _, done := start("a", "/b", false)
	err = <-done
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	assert.Contains(t, err.Error(), `tenant "a" already watches its limit of 3 directories`)
	assert.Equal(t, map[string]any{"kind": "watches", "limit": 3, "retry_after_seconds": 5}, errdefs.Details(err))

	// Tenant b: /b is the node's fourth; then the node is full.
	stopB, eventsB, doneB := start("b", "/b", false)
	require.Eventually(t, func() bool { return in.Watching("b") == 1 }, 5*time.Second, 10*time.Millisecond)
	_, _, done = start("c", "/b", false)
	err = <-done
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	assert.Contains(t, err.Error(), "all tenants together")

	stopA()
	require.NoError(t, <-doneA)
	assert.Zero(t, in.Watching("a"))
	// Tenant c now fits, on the directory b watches too (one descriptor).
	stopC, eventsC, doneC := start("c", "/b", false)
	require.Eventually(t, func() bool { return in.Watching("c") == 1 }, 5*time.Second, 10*time.Millisecond)
	stopC()
	require.NoError(t, <-doneC)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b", "f"), nil, 0o644))
	select {
	case ev := <-eventsB:
		assert.Equal(t, "/b/f", ev.Path, "b's watch outlives c's watch of the same directory")
	case <-time.After(5 * time.Second):
		t.Fatal("no event for b")
	}
	assert.Empty(t, eventsC)
	stopB()
	require.NoError(t, <-doneB)
}
