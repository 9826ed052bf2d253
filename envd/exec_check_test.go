package envd

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/internal/errdefs"
)

func TestCheckExecRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  ExecRequest
		ok   bool
	}{
		{"plain", ExecRequest{Args: []string{"sh", "-c", "id"}}, true},
		{"env and cwd", ExecRequest{Args: []string{"env"}, Env: []string{"A=", "B=c=d"}, Cwd: "/tmp"}, true},
		{"no args", ExecRequest{}, false},
		{"empty command", ExecRequest{Args: []string{""}}, false},
		{"NUL in an argument", ExecRequest{Args: []string{"echo", "a\x00b"}}, false},
		{"env without =", ExecRequest{Args: []string{"true"}, Env: []string{"NOVALUE"}}, false},
		{"env without a key", ExecRequest{Args: []string{"true"}, Env: []string{"=v"}}, false},
		{"NUL in env", ExecRequest{Args: []string{"true"}, Env: []string{"A=\x00"}}, false},
		{"relative cwd", ExecRequest{Args: []string{"true"}, Cwd: "tmp"}, false},
		{"NUL in cwd", ExecRequest{Args: []string{"true"}, Cwd: "/tmp\x00"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckExecRequest(tc.req)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			}
		})
	}
}
