package stargz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/containerd/stargz-snapshotter/snapshot"
	"github.com/moby/sys/mountinfo"
)

// stateDir is the directory at the root of every lazy layer mount where the
// stargz filesystem reports the layer's state (DIGEST.json).
const stateDir = ".stargz-snapshotter"

// cachedMarker is created next to a lazy layer's mount point (in the
// snapshot's directory, so it goes away with the snapshot) once every file of
// the layer has been read into the local cache.
const cachedMarker = "envd-cached"

// refetchFS wraps the stargz FileSystem: for every layer it mounts, it
// watches the layer's fetched size and, once that stands still for `after`
// short of the whole layer (the library's one-shot background fetch failed,
// typically because the registry was unreachable), reads every file through
// the mount until a full pass succeeds. Reads go through the stargz reader,
// so they fill the same cache the instance reads from.
type refetchFS struct {
	snapshot.FileSystem
	after time.Duration

	mu       sync.Mutex
	watchers map[string]context.CancelFunc
	wg       sync.WaitGroup
}

func newRefetchFS(inner snapshot.FileSystem, after time.Duration) *refetchFS {
	return &refetchFS{FileSystem: inner, after: after, watchers: map[string]context.CancelFunc{}}
}

func (f *refetchFS) Mount(ctx context.Context, mountpoint string, labels map[string]string) error {
	if err := f.FileSystem.Mount(ctx, mountpoint, labels); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.mu.Lock()
	if old, ok := f.watchers[mountpoint]; ok {
		old()
	}
	f.watchers[mountpoint] = cancel
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.watch(wctx, mountpoint)
	}()
	return nil
}

func (f *refetchFS) Unmount(ctx context.Context, mountpoint string) error {
	f.stop(mountpoint)
	return f.FileSystem.Unmount(ctx, mountpoint)
}

func (f *refetchFS) stop(mountpoint string) {
	f.mu.Lock()
	cancel, ok := f.watchers[mountpoint]
	delete(f.watchers, mountpoint)
	f.mu.Unlock()
	if ok {
		cancel()
	}
}

// close stops every watcher and waits for them.
func (f *refetchFS) close() {
	f.mu.Lock()
	for mp, cancel := range f.watchers {
		cancel()
		delete(f.watchers, mp)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *refetchFS) watch(ctx context.Context, mountpoint string) {
	lg := log.G(ctx).WithField("mountpoint", mountpoint)
	const poll = 2 * time.Second
	var last int64 = -1
	lastChange := time.Now()
	backoff := poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
		st, err := LayerState(mountpoint)
		if err != nil {
			lg.WithError(err).Debug("layer state")
			continue
		}
		if st.FetchedSize >= st.Size {
			markCached(mountpoint)
			lg.Debug("layer fully fetched")
			return
		}
		if st.FetchedSize != last {
			last, lastChange = st.FetchedSize, time.Now()
			continue
		}
		if time.Since(lastChange) < f.after {
			continue
		}
		lg.Infof("background fetch stalled at %d of %d bytes; reading the layer through its mount", st.FetchedSize, st.Size)
		if err := readAll(ctx, mountpoint); err != nil {
			lg.WithError(err).Warnf("fetch layer (retrying in %v)", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		markCached(mountpoint)
		lg.Info("layer fully cached")
		return
	}
}

func markCached(mountpoint string) {
	_ = os.WriteFile(filepath.Join(filepath.Dir(mountpoint), cachedMarker), nil, 0o600)
}

// readAll reads every regular file of the layer mounted at mountpoint.
func readAll(ctx context.Context, mountpoint string) error {
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(mountpoint, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() && p == filepath.Join(mountpoint, stateDir) {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		if _, err := io.CopyBuffer(io.Discard, fh, buf); err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		return nil
	})
}

// State is what the stargz filesystem reports about one lazy layer.
type State struct {
	Digest      string `json:"digest"`
	Size        int64  `json:"size"`        // compressed blob size
	FetchedSize int64  `json:"fetchedSize"` // bytes of the blob fetched so far
	Error       string `json:"error,omitempty"`
	// Cached is true once the whole layer is in the local cache: either the
	// background fetch fetched every byte or the refetcher read every file.
	Cached bool `json:"-"`
}

// LayerState reads the state of the lazy layer mounted at mountpoint.
func LayerState(mountpoint string) (State, error) {
	files, err := filepath.Glob(filepath.Join(mountpoint, stateDir, "*.json"))
	if err != nil {
		return State{}, err
	}
	if len(files) != 1 {
		return State{}, fmt.Errorf("no layer state under %s", mountpoint)
	}
	// The file is made by the FUSE filesystem as it is read, and its size
	// as it was looked up: once its numbers got longer, a read may come
	// back cut (a stressed run saw "unexpected end of JSON input"). Read
	// again after the kernel's attribute cache (1 s) has let go.
	var st State
	for attempt := 0; ; attempt++ {
		b, err := os.ReadFile(files[0])
		if err != nil {
			return State{}, err
		}
		if err = json.Unmarshal(b, &st); err == nil {
			break
		}
		if attempt == 4 {
			return State{}, fmt.Errorf("layer state %s: %w", files[0], err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(mountpoint), cachedMarker)); err == nil || st.FetchedSize >= st.Size {
		st.Cached = true
	}
	return st, nil
}

// LazyMounts returns the mount points of the lazy (FUSE) layers of the
// snapshotter whose state is under root.
func LazyMounts(root string) ([]string, error) {
	prefix := filepath.Join(root, "snapshotter", "snapshots") + "/"
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.Mountpoint, prefix) || !strings.HasPrefix(m.FSType, "fuse"), false
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// unmountAll detaches every mount under root (FUSE layers and overlays
// left behind by a snapshotter that was killed).
func unmountAll(root string) error {
	prefix := filepath.Clean(root) + "/"
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.Mountpoint, prefix), false
	})
	if err != nil {
		return err
	}
	var errs []error
	// Deepest first.
	for i := len(ms) - 1; i >= 0; i-- {
		if err := unmount(ms[i].Mountpoint); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
