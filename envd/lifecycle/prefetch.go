package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/snapshotter/prefetch"
	"github.com/envd-dev/envd/versions"
)

// maxPrefetchFiles caps a project's recorded first reads.
const maxPrefetchFiles = 5000

// flushFirstReads is how often a growing first-reads list is stored while
// it is recorded, so that a save made before the window ends uses it.
const flushFirstReads = time.Second

// collectSlice is how long the recording reads events between its looks at
// whether the first command has ended (its head, taken as it ended by
// markHead, is then stored).
const collectSlice = 100 * time.Millisecond

// firstReads is the recording of a new instance's first reads. It starts
// before the instance is reported Running (startFirstReads), so the first
// commands a client runs once it is are in it; recordFirstReads collects
// and stores it. A nil *firstReads records nothing.
type firstReads struct {
	in  versions.Instance
	rec *prefetch.Recording
	// marked is closed once head is set: the length of the list when the
	// instance's first command (session) ended, taken as it ended (markHead).
	marked chan struct{}
	head   int
}

// markHead takes the list's head at the end of the instance's first
// command: that command's reads are all queued by then, and the next
// command has not started (the first one's answer has not gone out).
func (f *firstReads) markHead() {
	f.head = len(prefetch.Prioritize(f.rec.Mark()))
	close(f.marked)
}

// startFirstReads marks the instance's rootfs for recording when its
// project saves eStargz layers and recording is on; nil otherwise (or
// when the mark cannot be placed: logged).
func (m *Manager) startFirstReads(ctx context.Context, in versions.Instance, compression string) *firstReads {
	if m.PrefetchWindow <= 0 || compression != string(snapshotter.Estargz) {
		return nil
	}
	st, err := m.Runtime.Status(ctx, in.ID)
	if err != nil || st.Pid == 0 {
		return nil
	}
	// The task's root, seen through /proc, is the container's rootfs
	// mount: a mount mark on it sees every open inside the instance.
	rec, err := prefetch.Start(fmt.Sprintf("/proc/%d/root", st.Pid), maxPrefetchFiles)
	if err != nil {
		m.Log.Warn("record first reads", "instance", in.ID, "err", err)
		return nil
	}
	f := &firstReads{in: in, rec: rec, marked: make(chan struct{})}
	m.onSessionEnd(in.ID, f.markHead)
	return f
}

// abandon ends a recording whose instance did not start.
func (f *firstReads) abandon() {
	if f != nil {
		f.rec.Close()
	}
}

// recordFirstReads collects what the instance reads in its first
// PrefetchWindow and records it on the project, storing the list as it
// grows (at most every flushFirstReads), so that a save made before the
// window ends uses it: the next save puts those files first in its eStargz
// layer, and the next start of a lazy instance of the project reads them
// ahead (warm.go). When the instance's first command ends, the list is
// stored at once with its length then as the head: what a first command
// needed, which a lazy start reads before it reports Running. Until the
// window ends, a list replaces the project's only when it is at least as
// long (an instance removed early, or a node shut down, recorded less than
// the last full window); the list of a whole window always does. Best
// effort: failures are logged.
func (m *Manager) recordFirstReads(f *firstReads) {
	if f == nil {
		return
	}
	in, rec := f.in, f.rec
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer rec.Close()
		ctx, cancel := context.WithTimeout(m.ctx, m.PrefetchWindow+10*time.Second)
		defer cancel()
		end := time.Now().Add(m.PrefetchWindow)
		var (
			files     []string
			stored    int
			head      int
			lastStore = time.Now() // the first store a second in, as the list grows
			marked    = f.marked
		)
		store := func(whole bool) {
			if len(files) <= stored || m.ctx.Err() != nil {
				return
			}
			if err := m.Store.SetProjectPrefetch(context.WithoutCancel(ctx), in.Tenant, in.Project, files, head, whole); err != nil {
				m.Log.Warn("store first reads", "project", in.Project, "err", err)
				return
			}
			stored, lastStore = len(files), time.Now()
		}
		for {
			left := time.Until(end)
			got, err := rec.Collect(ctx, min(max(left, 0), collectSlice))
			if err != nil && ctx.Err() == nil {
				m.Log.Warn("record first reads", "instance", in.ID, "err", err)
			}
			files = prefetch.Prioritize(got)
			headNow := false
			select {
			case <-marked:
				marked, head, headNow = nil, min(f.head, len(files)), f.head > 0
				if headNow {
					stored = 0 // stored again, with its head
				}
			default:
			}
			if headNow || time.Since(lastStore) >= flushFirstReads {
				store(false)
			}
			if err != nil || left <= 0 || rec.Full() {
				break
			}
		}
		// A window is whole only if the instance still runs at its end: the
		// recording of an instance removed or stopped early goes on
		// quietly until then.
		whole := time.Until(end) <= 0 || rec.Full()
		if whole {
			st, err := m.Runtime.Status(ctx, in.ID)
			whole = err == nil && st.Task == "running"
		}
		if whole {
			stored = 0 // the whole window's list replaces the project's
			store(true)
		} else {
			store(false)
		}
		if stored > 0 {
			m.Log.Info("recorded first reads", "instance", in.ID, "files", stored, "head", head, "queue_overflows", rec.Overflows())
		}
	}()
}
