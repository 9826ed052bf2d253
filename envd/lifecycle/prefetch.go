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

// firstReads is the recording of a new instance's first reads. It starts
// before the instance is reported Running (startFirstReads), so the first
// commands a client runs once it is are in it; recordFirstReads collects
// and stores it. A nil *firstReads records nothing.
type firstReads struct {
	in  versions.Instance
	rec *prefetch.Recording
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
	return &firstReads{in: in, rec: rec}
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
// project reads them ahead, waiting up to 0.25 s before it reports Running
// (warm.go). Best effort: failures are logged.
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
		stored := 0
		for {
			left := time.Until(end)
			files, err := rec.Collect(ctx, min(max(left, 0), flushFirstReads))
			if err != nil && ctx.Err() == nil {
				m.Log.Warn("record first reads", "instance", in.ID, "err", err)
			}
			files = prefetch.Prioritize(files)
			if len(files) > stored && m.ctx.Err() == nil {
				if err := m.Store.SetProjectPrefetch(context.WithoutCancel(ctx), in.Tenant, in.Project, files); err != nil {
					m.Log.Warn("store first reads", "project", in.Project, "err", err)
				} else {
					stored = len(files)
				}
			}
			if err != nil || left <= flushFirstReads || rec.Full() {
				break
			}
		}
		if stored > 0 {
			m.Log.Info("recorded first reads", "instance", in.ID, "files", stored, "queue_overflows", rec.Overflows())
		}
	}()
}
