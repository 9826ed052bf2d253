package save

import (
	"context"
	"errors"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// CaptureKinds are the operations that capture an instance's layer: one at
// a time per instance (see versions.Operations.CreateExclusiveOperation).
var CaptureKinds = []types.OpKind{types.OpKindSave, types.OpKindFork, types.OpKindCheckpoint}

// Guard claims the instance's capture on this node for what, after
// checking that no capture operation of it runs on any node (a hibernation
// is not an operation; a save is). Call release when the capture ends.
func (s *Saver) Guard(ctx context.Context, id, what string) (release func(), err error) {
	op, err := s.Store.UnfinishedOperationOn(ctx, id, CaptureKinds)
	switch {
	case err == nil && op.ID != what:
		return nil, errdefs.WithDetails(fmt.Errorf("instance %q: %s operation %s is still running; one at a time: "+
			"wait for it to finish, then try again: %w", id, op.Kind, op.ID, errdefs.ErrFailedPrecondition),
			map[string]any{"operation": op.ID})
	case err != nil && !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	return s.Gate.ClaimCapture(id, what)
}

// ThawInterrupted resumes the tasks of this node's Running instances that
// are frozen: only a save freezes a Running instance, so a frozen one was
// left by a process that died during a save's freeze window.
func (s *Saver) ThawInterrupted(ctx context.Context) error {
	ins, err := s.Store.ListNodeInstances(ctx, s.Node)
	if err != nil {
		return fmt.Errorf("instances of node %q: %w", s.Node, err)
	}
	for _, in := range ins {
		if in.State != types.StateRunning {
			continue
		}
		st, err := s.Runtime.Status(ctx, in.ID)
		if err != nil || st.Task != "paused" {
			continue
		}
		if err := s.Runtime.Resume(ctx, in.ID); err != nil {
			s.Log.Warn("thaw instance frozen by an interrupted save", "instance", in.ID, "err", err)
			continue
		}
		s.Log.Info("thawed instance frozen by an interrupted save", "instance", in.ID)
	}
	return nil
}

// CheckGeneration fences a request that names a generation (g != 0): only
// the instance's newest one may act.
func CheckGeneration(in versions.Instance, g int64) error {
	if g != 0 && g != in.Generation {
		return errdefs.WithDetails(fmt.Errorf("instance %q: generation %d is stale, the newest is %d: %w", in.ID, g, in.Generation, errdefs.ErrStaleGeneration),
			map[string]any{"generation": in.Generation})
	}
	return nil
}
