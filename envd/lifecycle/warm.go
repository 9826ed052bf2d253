package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/snapshotter/prefetch"
	"github.com/envd-dev/envd/versions"
)

// Bounds of warming a lazy instance before it is reported Running.
const (
	// warmNeededTimeout bounds reading what the init needs. The lazy
	// snapshotter fails a read the registry cannot serve after its fetch
	// timeout (20 s): a start through a registry outage fails in about
	// that time, instead of being reported Running and its init dying on
	// the first page it cannot fetch.
	warmNeededTimeout = 30 * time.Second
	// warmFilesTimeout and warmFilesBytes bound reading the project's
	// recorded first reads ahead, in the background; what does not fit is
	// fetched on demand as before.
	warmFilesTimeout = 10 * time.Second
	warmFilesBytes   = 512 << 20
	warmWorkers      = 8
	// warmFilesHold is how long, from the task's start, the start waits
	// for the read-ahead of the first reads before it reports Running:
	// the first commands then find their files local (a learned `dot -V`
	// took 0.47 s with its files still coming, against 0.09 s on a local
	// image), while a long list or a loaded node costs the start at most
	// this. The list is in first-read order, so what the first commands
	// read comes first; the rest goes on in the background. Reading ahead
	// costs about what reading on demand does (the CPU of decompressing
	// and serving through FUSE, on the same cores): holding the start for
	// the whole 20 MB Graphviz list (0.5-1 s) made the learned restore's
	// time to first command longer than the first restore's.
	warmFilesHold = 250 * time.Millisecond
	// warmHeadHold replaces warmFilesHold when the list's head is known
	// (versions.Project.PrefetchHead): the start reads only what the
	// recorded instance's first command read and waits longer for it. The
	// rest (the tail) is read after the new instance's first command ends,
	// or warmTailAfter after Running, whichever comes first, warmTailWorkers
	// at a time, so it does not compete with the start or that command.
	warmHeadHold    = time.Second
	warmTailAfter   = 3 * time.Second
	warmTailWorkers = 2
)

// prefetchParts splits the project's first reads into what a lazy start
// reads ahead before it reports Running (head) and what it reads later
// (tail); without a known head, all of it is read from the start on.
func prefetchParts(proj versions.Project) (head, tail []string, hold time.Duration) {
	files, n := proj.Prefetch, proj.PrefetchHead
	if n <= 0 || n >= len(files) {
		return files, nil, warmFilesHold
	}
	return files[:n], files[n:], warmHeadHold
}

// initCommands are runtime's init (`/bin/sh -c SCRIPT`) and the commands
// its script runs (`sleep`).
var initCommands = []string{"/bin/sh", "sleep"}

// warm makes a lazily restored instance's init independent of the
// registry before the instance is reported Running: it reads, through the
// instance's root, the init's executable, libraries and commands (an error
// here fails the start: errdefs.ErrUnavailable when the registry could not
// serve them). Beside it, from the task's start on, it reads the project's
// recorded first reads ahead (readAhead): the head, what the recorded
// instance's first command read, waiting for it up to warmHeadHold, or,
// when no head is known, the whole list, waiting up to warmFilesHold; so
// that the first commands find their files local. The tail is read later
// (readAheadTail). An instance whose layers are all local is left alone.
func (m *Manager) warm(ctx context.Context, in versions.Instance, proj versions.Project) error {
	st, err := m.Runtime.Status(ctx, in.ID)
	if err != nil {
		return err
	}
	if st.Task != "running" || st.Pid == 0 {
		// An init that ended already is reported by the exit watch
		// (exits.go) as task_exited; a runtime without processes (tests)
		// has nothing to read.
		return nil
	}
	lazy, err := prefetch.Lazy(int(st.Pid))
	if err != nil || !lazy {
		return nil // an init gone already shows below, as task_exited
	}
	started := time.Now()
	head, tail, holdFor := prefetchParts(proj)
	ahead, stop := m.readAhead(in, int(st.Pid), head, warmWorkers)
	nctx, cancel := context.WithTimeout(ctx, warmNeededTimeout)
	defer cancel()
	res, err := prefetch.Warm(nctx, int(st.Pid), prefetch.WarmOptions{Commands: initCommands})
	if err != nil {
		stop()
		if nctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
		}
		return fmt.Errorf("lazy instance %q: what its init needs is not local after %s (registry unreachable?): %w",
			in.ID, time.Since(started).Round(time.Millisecond), err)
	}
	m.Log.Info("warmed lazy instance", "instance", in.ID,
		"needed_files", res.Needed, "needed_bytes", res.NeededBytes, "ms", time.Since(started).Milliseconds())
	hold := time.NewTimer(time.Until(started.Add(holdFor)))
	defer hold.Stop()
	select {
	case <-ahead:
	case <-hold.C:
	case <-ctx.Done():
	}
	m.readAheadTail(in, int(st.Pid), tail, ahead)
	return nil
}

// readAheadTail reads the rest of the first reads (after the head) through
// the instance's root once the head's read-ahead is over and the
// instance's first command has ended, or warmTailAfter has passed; in the
// background, best effort. It subscribes to the command's end before the
// instance is reported Running, so an early command is not missed.
func (m *Manager) readAheadTail(in versions.Instance, pid int, tail []string, headDone <-chan struct{}) {
	if len(tail) == 0 {
		return
	}
	ended := m.nextSessionEnd(in.ID)
	m.wg.Go(func() {
		after := time.NewTimer(warmTailAfter)
		defer after.Stop()
		wait := func(ch <-chan struct{}) bool {
			select {
			case <-ch:
				return true
			case <-after.C:
			case <-m.ctx.Done():
			}
			return false
		}
		if wait(headDone) {
			wait(ended)
		}
		if m.ctx.Err() != nil {
			return
		}
		if st, err := m.Runtime.Status(m.ctx, in.ID); err != nil || st.Task != "running" || int(st.Pid) != pid {
			return // removed or stopped meanwhile
		}
		done, _ := m.readAhead(in, pid, tail, warmTailWorkers)
		<-done
	})
}

// layerDirs is what readAheadLayers needs of the runtime (runtime.Runtime
// has it; runtimes without lazy layers need not).
type layerDirs interface {
	LayerDirs(ctx context.Context, ref string) ([]string, error)
}

// readAheadLayers starts reading the project's recorded first reads from
// a lazily pulled image's layers, in the background, as soon as they are
// mounted: before the container is made and its task started, which it
// overlaps. The read-ahead through the instance's root (readAhead) then
// finds them cached or on their way. Bounded like readAhead; best effort.
func (m *Manager) readAheadLayers(in versions.Instance, ref string, files []string) {
	ld, ok := m.Runtime.(layerDirs)
	if !ok || len(files) == 0 {
		return
	}
	m.wg.Go(func() {
		started := time.Now()
		ctx, cancel := context.WithTimeout(m.ctx, warmFilesTimeout)
		defer cancel()
		dirs, err := ld.LayerDirs(ctx, ref)
		if err != nil || len(dirs) == 0 {
			if err != nil {
				m.Log.Warn("read first reads ahead from the layers", "instance", in.ID, "err", err)
			}
			return
		}
		res, err := prefetch.WarmLayers(ctx, dirs, prefetch.WarmOptions{Files: files, MaxBytes: warmFilesBytes, MaxFileBytes: snapshotter.PrioritizedFileMax, Workers: warmWorkers})
		if err != nil {
			m.Log.Warn("read first reads ahead from the layers", "instance", in.ID, "err", err)
			return
		}
		m.Log.Info("read first reads ahead from the layers", "instance", in.ID, "files", res.Files, "bytes", res.FileBytes,
			"skipped", res.Skipped, "ms", time.Since(started).Milliseconds())
	})
}

// readAhead reads files of the project's recorded first reads through the
// instance's root in the background, in order, workers at a time, bounded by
// warmFilesTimeout and warmFilesBytes. done is closed when it ends; stop
// ends it early.
func (m *Manager) readAhead(in versions.Instance, pid int, files []string, workers int) (done <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	if len(files) == 0 {
		close(ch)
		return ch, func() {}
	}
	ctx, cancel := context.WithTimeout(m.ctx, warmFilesTimeout)
	m.wg.Go(func() {
		defer close(ch)
		defer cancel()
		started := time.Now()
		res, err := prefetch.Warm(ctx, pid, prefetch.WarmOptions{
			Files: files, MaxBytes: warmFilesBytes, MaxFileBytes: snapshotter.PrioritizedFileMax, Workers: workers, FilesOnly: true,
		})
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			m.Log.Warn("read first reads ahead", "instance", in.ID, "err", err)
			return
		}
		m.Log.Info("read first reads ahead", "instance", in.ID, "files", res.Files, "bytes", res.FileBytes,
			"skipped", res.Skipped, "ms", time.Since(started).Milliseconds())
	})
	return ch, cancel
}
