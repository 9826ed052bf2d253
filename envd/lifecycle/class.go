package lifecycle

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// classRuntime is what the class check needs of a runtime that has
// classes (runtime.Runtime); one without them runs runc only.
type classRuntime interface {
	DefaultClass() runtime.Class
	ClassErr(ctx context.Context, c runtime.Class) error
}

// effectiveClass is the class an instance of proj gets on this node.
func (m *Manager) effectiveClass(proj versions.Project) runtime.Class {
	if proj.RuntimeClass != "" {
		return runtime.Class(proj.RuntimeClass)
	}
	if cr, ok := m.Runtime.(classRuntime); ok {
		return cr.DefaultClass()
	}
	return runtime.ClassRunc
}

// checkClass refuses, before anything is recorded, an instance of proj
// whose effective class its tenant may not use (permission_denied) or this
// node cannot run (failed_precondition, runtime.ErrClassUnavailable).
func (m *Manager) checkClass(ctx context.Context, tenant string, proj versions.Project) error {
	class := m.effectiveClass(proj)
	max, err := m.Store.LimitMaxima(ctx, tenant)
	if err != nil {
		return err
	}
	if err := spec.CheckClass(string(class), max); err != nil {
		return fmt.Errorf("instance of project %q: %w", proj.Name, err)
	}
	if cr, ok := m.Runtime.(classRuntime); ok {
		if err := cr.ClassErr(ctx, class); err != nil {
			return fmt.Errorf("instance of project %q: %w", proj.Name, err)
		}
	}
	return nil
}
