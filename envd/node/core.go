package node

import (
	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/sshd"
)

// The Service with its parts serves every route group.
var (
	_ api.Core        = envd.Core{}
	_ api.PreviewCore = envd.Core{}
	_ sshd.Core       = envd.Core{}
)
