package envd

import (
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/lifecycle"
)

// CheckExecRequest refuses what the OCI runtime would fail on only after
// the exec was sent to it (see lifecycle.CheckExecRequest).
func CheckExecRequest(req types.ExecRequest) error { return lifecycle.CheckExecRequest(req) }
