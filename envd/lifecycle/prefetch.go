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

// recordFirstReads watches what a just-started instance reads in its first
// PrefetchWindow and records it on the project: the next save puts those
// files first in its eStargz layer, so the next lazy restore fetches what
// the first commands need in one go. Best effort: failures are logged.
func (m *Manager) recordFirstReads(in versions.Instance, compression string) {
	if m.PrefetchWindow <= 0 || compression != string(snapshotter.Estargz) {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, m.PrefetchWindow+10*time.Second)
		defer cancel()
		st, err := m.Runtime.Status(ctx, in.ID)
		if err != nil || st.Pid == 0 {
			return
		}
		// The task's root, seen through /proc, is the container's rootfs
		// mount: a mount mark on it sees every open inside the instance.
		files, err := prefetch.Record(ctx, fmt.Sprintf("/proc/%d/root", st.Pid), m.PrefetchWindow, maxPrefetchFiles)
		if err != nil && ctx.Err() == nil {
			m.Log.Warn("record first reads", "instance", in.ID, "err", err)
		}
		files = prefetch.Prioritize(files)
		if len(files) == 0 || m.ctx.Err() != nil {
			return
		}
		if err := m.Store.SetProjectPrefetch(context.WithoutCancel(ctx), in.Tenant, in.Project, files); err != nil {
			m.Log.Warn("store first reads", "project", in.Project, "err", err)
			return
		}
		m.Log.Info("recorded first reads", "instance", in.ID, "files", len(files))
	}()
}
