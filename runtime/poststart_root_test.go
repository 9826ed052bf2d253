package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An executable /etc/envd/post-start runs at each start of the task
// (builder/devcontainer writes it from postStartCommand), in the
// background, with the instance's environment; without it nothing runs.
func TestRootPostStartHook(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	const id = "hook"
	env.create(t, InstanceSpec{ID: id, Env: []string{"HOOK_VAR=seen"}})
	_, _, code := env.run(t, id, "test", "-e", "/tmp/envd-post-start.log")
	assert.Equal(t, 1, code, "no hook, no log")

	_, stderr, code := env.run(t, id, "sh", "-c", `mkdir -p /etc/envd && printf '#!/bin/sh\necho "start $HOOK_VAR" >> /root/starts\n' > /etc/envd/post-start && chmod 755 /etc/envd/post-start`)
	require.Equal(t, 0, code, stderr)
	starts := func() string {
		out, _, _ := env.run(t, id, "sh", "-c", "cat /root/starts 2>/dev/null")
		return out
	}
	for round := 1; round <= 2; round++ {
		require.NoError(t, env.rt.Stop(ctx, id))
		require.NoError(t, env.rt.Start(ctx, id))
		want := strings.Repeat("start seen\n", round)
		require.Eventually(t, func() bool { return starts() == want }, 20*time.Second, 100*time.Millisecond,
			"round %d: the hook ran once per start: %q", round, starts())
	}
}
