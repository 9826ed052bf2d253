package envd

import (
	"context"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/envd/squash"
)

// squashStale is how long a node's claim on a squash holds: longer than
// any squash takes, short enough that a failed one is tried again the same
// day.
const squashStale = time.Hour

// wireSquash makes the background squash of deep versions (envd/squash)
// when the node is configured for it; Start starts it, Close waits for it.
func (s *Service) wireSquash(ctx context.Context) {
	if s.cfg.SquashAfter <= 0 {
		return
	}
	interval := s.cfg.SquashInterval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	sq := &squash.Squasher{Store: s.store.Versions, Reg: s.reg, Bases: s.builds, Content: s.content,
		WorkDir: filepath.Join(s.cfg.WorkDir, "squash"), MaxDepth: s.cfg.SquashAfter, Stale: squashStale, Log: s.log}
	s.squashRun = func() { s.squashing.Go(func() { sq.Run(ctx, interval) }) }
}

// runSquash starts the squash loop, if there is one.
func (s *Service) runSquash() {
	if s.squashRun != nil {
		s.squashRun()
	}
}
