package types

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/errdefs"
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
		{"cwd a leaked fd under /proc", ExecRequest{Args: []string{"true"}, Cwd: "/proc/self/fd/7"}, false},
		{"cwd /sys", ExecRequest{Args: []string{"true"}, Cwd: "/sys"}, false},
		{"cwd under /dev", ExecRequest{Args: []string{"true"}, Cwd: "/dev/shm"}, false},
		{"cwd not clean", ExecRequest{Args: []string{"true"}, Cwd: "/tmp/../proc"}, false},
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

func TestCheckCwd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"", true}, {"/", true}, {"/tmp", true}, {"/root/work", true},
		{"/procfs", true}, {"/device", true}, {"/srv/proc", true},
		{"tmp", false}, {"./tmp", false}, {"/tmp/", false}, {"//tmp", false},
		{"/tmp/../proc", false}, {"/tmp/.", false}, {"/tmp\x00", false},
		{"/proc", false}, {"/proc/self/fd/7", false}, {"/proc/1/cwd", false},
		{"/sys", false}, {"/sys/fs/cgroup", false},
		{"/dev", false}, {"/dev/shm", false},
	} {
		err := CheckCwd(tc.dir)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.dir)
		} else {
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%q", tc.dir)
		}
	}
}
