package command

import (
	"fmt"
	"strings"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
)

// CheckExecRequest refuses what the OCI runtime would fail on only after
// the exec was sent to it: no command, NUL bytes (argv, environment and the
// directory are C strings), environment entries that are not KEY=VALUE,
// and a working directory runtime.CheckCwd refuses (relative, not clean,
// or in /proc, /sys or /dev). The error wraps
// errdefs.ErrInvalidArgument.
func CheckExecRequest(req types.ExecRequest) error {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	for i, a := range req.Args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("exec: args[%d] %q contains a NUL byte: %w", i, a, errdefs.ErrInvalidArgument)
		}
	}
	for _, e := range req.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("exec: env %q: want KEY=VALUE without NUL bytes: %w", e, errdefs.ErrInvalidArgument)
		}
	}
	if err := runtime.CheckCwd(req.Cwd); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}
