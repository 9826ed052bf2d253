package api

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// Every stable error code the server can answer is documented with its
// status and known to both SDKs with the same status, so a client never
// meets a code it cannot name.
func TestErrorCodesAreDocumentedAndKnownToTheSDKs(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	apiMD := read("../docs/api.md")
	openapi := read("../docs/openapi.yaml")
	tsErrors := read("../sdk/typescript/src/errors.ts")
	tsTypes := read("../sdk/typescript/src/types.ts")
	pyErrors := read("../sdk/python/envd/errors.py")
	m := regexp.MustCompile(`examples: \[(invalid_argument[^\]]*)\]`).FindStringSubmatch(openapi)
	require.NotNil(t, m, "docs/openapi.yaml: ErrorDetail.code examples")
	specCodes := strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")

	codes := errdefs.Codes()
	require.Greater(t, len(codes), 10)
	for _, c := range codes {
		t.Run(c.Code, func(t *testing.T) {
			has := func(doc, want, where string) {
				t.Helper()
				assert.Truef(t, strings.Contains(doc, want), "%s lacks %s", where, want)
			}
			has(apiMD, fmt.Sprintf("| `%s` | %d |", c.Code, c.Status), "docs/api.md, Errors table")
			assert.Containsf(t, specCodes, c.Code, "docs/openapi.yaml, ErrorDetail.code examples")
			assert.Truef(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  %s: \[\w+Error, %d\],$`, c.Code, c.Status)).MatchString(tsErrors),
				"sdk/typescript/src/errors.ts lacks %s with status %d", c.Code, c.Status)
			has(tsTypes, fmt.Sprintf("| %q", c.Code), "sdk/typescript/src/types.ts, ErrorCode")
			has(pyErrors, fmt.Sprintf("code_name = %q", c.Code), "sdk/python/envd/errors.py, a class")
			has(pyErrors, fmt.Sprintf("%q: %d,", c.Code, c.Status), "sdk/python/envd/errors.py, CODE_STATUS")
		})
	}
}
