package envd

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
func (s *Service) recordFirstReads(in versions.Instance, compression string) {
	if s.cfg.PrefetchWindow <= 0 || compression != string(snapshotter.Estargz) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PrefetchWindow+10*time.Second)
		defer cancel()
		st, err := s.rt.Status(ctx, in.ID)
		if err != nil || st.Pid == 0 {
			return
		}
		// The task's root, seen through /proc, is the container's rootfs
		// mount: a mount mark on it sees every open inside the instance.
		files, err := prefetch.Record(ctx, fmt.Sprintf("/proc/%d/root", st.Pid), s.cfg.PrefetchWindow, maxPrefetchFiles)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("record first reads", "instance", in.ID, "err", err)
		}
		files = prefetch.Prioritize(files)
		if len(files) == 0 || s.ctx.Err() != nil {
			return
		}
		if err := s.store.SetProjectPrefetch(context.WithoutCancel(ctx), in.Tenant, in.Project, files); err != nil {
			s.log.Warn("store first reads", "project", in.Project, "err", err)
			return
		}
		s.log.Info("recorded first reads", "instance", in.ID, "files", len(files))
	}()
}
