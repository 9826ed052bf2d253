package command

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
)

func TestCheckExecRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  types.ExecRequest
		ok   bool
	}{
		{"plain", types.ExecRequest{Args: []string{"sh", "-c", "id"}}, true},
		{"env and cwd", types.ExecRequest{Args: []string{"env"}, Env: []string{"A=", "B=c=d"}, Cwd: "/tmp"}, true},
		{"no args", types.ExecRequest{}, false},
		{"empty command", types.ExecRequest{Args: []string{""}}, false},
		{"NUL in an argument", types.ExecRequest{Args: []string{"echo", "a\x00b"}}, false},
		{"env without =", types.ExecRequest{Args: []string{"true"}, Env: []string{"NOVALUE"}}, false},
		{"env without a key", types.ExecRequest{Args: []string{"true"}, Env: []string{"=v"}}, false},
		{"NUL in env", types.ExecRequest{Args: []string{"true"}, Env: []string{"A=\x00"}}, false},
		{"relative cwd", types.ExecRequest{Args: []string{"true"}, Cwd: "tmp"}, false},
		{"NUL in cwd", types.ExecRequest{Args: []string{"true"}, Cwd: "/tmp\x00"}, false},
		{"cwd a leaked fd under /proc", types.ExecRequest{Args: []string{"true"}, Cwd: "/proc/self/fd/7"}, false},
		{"cwd /sys", types.ExecRequest{Args: []string{"true"}, Cwd: "/sys"}, false},
		{"cwd under /dev", types.ExecRequest{Args: []string{"true"}, Cwd: "/dev/shm"}, false},
		{"cwd not clean", types.ExecRequest{Args: []string{"true"}, Cwd: "/tmp/../proc"}, false},
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
