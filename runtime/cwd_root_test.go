package runtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// A working directory under /proc (the runc CVE-2024-21626 vector, cwd
// /proc/self/fd/N) is refused before runc sees it: by exec, with and
// without a terminal, with and without the agent, and in an image's
// WorkingDir at create.
func TestRootCwdUnderProcRefused(t *testing.T) {
	t.Parallel()
	for _, agents := range []bool{false, true} {
		name := "runc exec"
		if agents {
			name = "agent"
		}
		t.Run(name, func(t *testing.T) {
			var env *testEnv
			if agents {
				env = newAgentEnv(t)
			} else {
				env = newTestEnv(t, freeSubnet(t))
			}
			ctx := context.Background()
			env.create(t, InstanceSpec{ID: "cwd"})
			if agents {
				require.NoError(t, env.rt.StartAgent(ctx, "cwd"))
				require.Contains(t, parentOf(t, env, "cwd"), agentBinDest, "commands run through the agent")
			}
			for _, tty := range []bool{false, true} {
				for _, dir := range []string{"/proc/self/fd/7", "/proc", "/sys/fs/cgroup", "/dev", "/tmp/../proc/self/cwd"} {
					_, err := env.rt.Exec(ctx, "cwd", ExecSpec{Args: []string{"pwd"}, Cwd: dir, TTY: tty})
					assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "cwd %q tty %v", dir, tty)
				}
			}
			out, _, code := env.run(t, "cwd", "pwd")
			assert.Equal(t, 0, code)
			assert.Equal(t, "/\n", out, "a plain exec still works")

			if agents {
				return
			}
			ref := pushRootfsImageWorkdir(t, env.reg, "test/procdir", busyboxRootfsTar(t), "/proc/self/fd/8")
			require.NoError(t, env.rt.Pull(ctx, ref))
			err := env.rt.Create(ctx, InstanceSpec{ID: "procdir", Image: ref})
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.ErrorContains(t, err, "/proc/self/fd/8")
			ids, err := env.rt.List(ctx)
			require.NoError(t, err)
			assert.NotContains(t, ids, "procdir", "nothing is left of the refused instance")
		})
	}
}
