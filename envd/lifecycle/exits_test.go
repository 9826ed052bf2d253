package lifecycle

import (
	"testing"

	"github.com/envd-dev/envd/runtime"
)

func TestExitMessage(t *testing.T) {
	for _, c := range []struct {
		st   runtime.Status
		want string
	}{
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 0}, "its init exited with status 0; the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 2}, "its init exited with status 2; the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 137}, "its init exited with status 137 (signal SIGKILL); the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 143}, "its init exited with status 143 (signal SIGTERM); the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 128 + 40}, "its init exited with status 168 (signal 40); the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: "stopped", ExitCode: 255}, "its init exited with status 255; the writable layer is kept until removal"},
		{runtime.Status{Exists: true, Task: ""}, "its processes exited; the writable layer is kept until removal"},
	} {
		if got := exitMessage(c.st); got != c.want {
			t.Errorf("exitMessage(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}
