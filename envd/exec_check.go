package envd

import (
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/command"
)

// CheckExecRequest refuses what the OCI runtime would fail on only after
// the exec was sent to it (see command.CheckExecRequest).
func CheckExecRequest(req types.ExecRequest) error { return command.CheckExecRequest(req) }
