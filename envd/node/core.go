package node

import (
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/sshd"
)

// The SSH endpoint takes the Service with its parts.
var _ sshd.Core = envd.Core{}
