package spec

import (
	"fmt"
	"slices"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Runtime classes of projects and tenants.
//
// Terms:
//   - project class: versions.Project.RuntimeClass, what the project asks
//     for; "" = the class of the node that starts the instance (its
//     --runtime-class).
//   - effective class: the project class, or that node default.
//   - tenant classes: versions.LimitMaxima.RuntimeClasses, what an admin
//     lets the tenant use; empty = any.
//
// A project naming a class its tenant may not use is refused when it is
// set; an instance whose effective class its tenant may not use is refused
// before anything is recorded or started (CheckClass). Both with
// errdefs.ErrPermissionDenied and the details runtime_class and
// allowed_runtime_classes.

// ParseClasses checks and normalizes a tenant's classes: each a known
// class name (not ""), sorted, without repeats; empty stays nil (any).
func ParseClasses(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		c, err := runtime.ParseClass(n)
		if err != nil {
			return nil, err
		}
		if c == "" {
			return nil, fmt.Errorf("runtime classes %q: an empty name: %w", names, errdefs.ErrInvalidArgument)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CheckClass refuses class ("" passes: it is decided per node, and checked
// again there as an effective class) when the tenant's maxima do not
// allow it.
func CheckClass(class string, m versions.LimitMaxima) error {
	if class == "" || len(m.RuntimeClasses) == 0 || slices.Contains(m.RuntimeClasses, class) {
		return nil
	}
	return errdefs.WithDetails(
		fmt.Errorf("runtime class %q: the tenant may use only %q: %w", class, m.RuntimeClasses, errdefs.ErrPermissionDenied),
		map[string]any{"runtime_class": class, "allowed_runtime_classes": m.RuntimeClasses})
}
