package api_test

import (
	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd"
)

// The service core serves every route group with its own methods; the fake
// (apitest) is for the transport tests only.
var _ api.Core = (*envd.Service)(nil)
