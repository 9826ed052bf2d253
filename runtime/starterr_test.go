package runtime

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/errdefs"
)

// The strings are runc 1.1's, as containerd v2.4 passes them on (seen on
// this node; TestRootExecCommandNotRun runs them for real).
func TestCommandNotRun(t *testing.T) {
	const prefix = "OCI runtime exec failed: exec failed: unable to start container process: "
	for _, tc := range []struct {
		name, err string
		code      int
		msg       string
	}{
		{"not in PATH", prefix + `exec: "nosuch": executable file not found in $PATH: unknown`, 127, "nosuch: executable file not found in $PATH"},
		{"absolute missing", prefix + `exec: "/nosuch": stat /nosuch: no such file or directory`, 127, "/nosuch: no such file or directory"},
		{"relative missing", prefix + `exec: "./x": stat ./x: no such file or directory: unknown`, 127, "./x: no such file or directory"},
		{"not executable", prefix + `exec: "/etc/passwd": permission denied`, 126, "/etc/passwd: permission denied"},
		{"a directory", prefix + `exec: "/etc": permission denied`, 126, "/etc: permission denied"},
		{"quoted name", prefix + `exec: "a \"b\"": executable file not found in $PATH`, 127, `a "b": executable file not found in $PATH`},
		{"working directory", prefix + `chdir to cwd ("/nope") set in config.json failed: no such file or directory`, 0, ""},
		{"other error", "ttrpc: closed", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg, ok := commandNotRun(errors.New(tc.err))
			assert.Equal(t, tc.code != 0, ok)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.msg, msg)
		})
	}
}

func TestStartErrKeepsTheRuntimesReason(t *testing.T) {
	err := startErr(errors.New(`OCI runtime create failed: runc create failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: too many levels of symbolic links: unknown`),
		"create task of instance %q", "i1")
	assert.ErrorIs(t, err, errdefs.ErrStartFailed)
	assert.Equal(t, `create task of instance "i1": exec: "/bin/sh": stat /bin/sh: too many levels of symbolic links: process could not start`, err.Error())

	err = startErr(errors.New("connection refused"), "start task of instance %q", "i1")
	assert.NotErrorIs(t, err, errdefs.ErrStartFailed)
}
