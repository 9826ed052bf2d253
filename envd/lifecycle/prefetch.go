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

// collectSlice is how long the recording reads events before it looks
// for the end of the instance's first command again.
const collectSlice = 100 * time.Millisecond

// firstReads is the recording of a new instance's first reads. It starts
// before the instance is reported Running (startFirstReads), so the first
// commands a client runs once it is are in it; recordFirstReads collects
// and stores it. A nil *firstReads records nothing.
type firstReads struct {
	in  versions.Instance
	rec *prefetch.Recording
	// firstEnd is closed when the instance's first command (session)
	// ends: the list's length then is its head.
	firstEnd <-chan struct{}
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
	return &firstReads{in: in, rec: rec, firstEnd: m.nextSessionEnd(in.ID)}
}

// abandon ends a recording whose instance did not start.
func (f *firstReads) abandon() {
	if f != nil {
		f.rec.Close()
	}
}

// recordFirstReads collects what the instance reads in its first
// PrefetchWindow and records it on the project, storing the list as it
// grows (at most every flushFirstReads): the next save puts those files
// first in its eStargz layer, and the next start of a lazy instance of the
// project reads them ahead (warm.go). When the instance's first command
// ends, the list is stored at once with its length as the head: what a
// first command needed, which a lazy start reads before it reports Running.
// Best effort: failures are logged.
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
			firstEnd  = f.firstEnd
		)
		store := func() {
			if len(files) <= stored || m.ctx.Err() != nil {
				return
			}
			if err := m.Store.SetProjectPrefetch(context.WithoutCancel(ctx), in.Tenant, in.Project, files, head); err != nil {
				m.Log.Warn("store first reads", "project", in.Project, "err", err)
				return
			}
			stored, lastStore = len(files), time.Now()
		}
		for {
			left := time.Until(end)
			wait, ended := min(max(left, 0), collectSlice), false
			select {
			case <-firstEnd: // its reads are queued already: drain them
				wait, ended, firstEnd = 0, true, nil
			default:
			}
			got, err := rec.Collect(ctx, wait)
			if err != nil && ctx.Err() == nil {
				m.Log.Warn("record first reads", "instance", in.ID, "err", err)
			}
			files = prefetch.Prioritize(got)
			if ended && len(files) > 0 {
				head, stored = len(files), 0 // stored again, with its head
			}
			if ended || time.Since(lastStore) >= flushFirstReads {
				store()
			}
			if err != nil || left <= 0 || rec.Full() {
				break
			}
		}
		store()
		if stored > 0 {
			m.Log.Info("recorded first reads", "instance", in.ID, "files", stored, "head", head, "queue_overflows", rec.Overflows())
		}
	}()
}
