package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

func TestExecStream(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	core.Exec.ExecStreamFunc = func(_ context.Context, _ string, req types.ExecRequest, stdio types.Stdio) (int, error) {
		b, err := io.ReadAll(stdio.Stdin)
		if err != nil {
			return -1, err
		}
		fmt.Fprint(stdio.Stdout, strings.ToUpper(string(b)))
		fmt.Fprint(stdio.Stderr, "done")
		return len(req.Args), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	big := strings.Repeat("abc", 100<<10) // several messages each way
	code, err := c.ExecStream(ctx, "i-1", types.ExecRequest{Args: []string{"tr", "a-z", "A-Z"}, Env: []string{"A=1"}, Cwd: "/w"},
		types.Stdio{Stdin: strings.NewReader(big), Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	assert.Equal(t, 3, code)
	assert.Equal(t, strings.ToUpper(big), out.String())
	assert.Equal(t, "done", errb.String())
	call, _ := core.LastCall("ExecStream")
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"tr", "a-z", "A-Z"}, Env: []string{"A=1"}, Cwd: "/w"}, false}, call.Args)
}

func TestExecStreamTTYResize(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	sizes := make(chan types.TermSize, 1)
	sizes <- types.TermSize{Cols: 80, Rows: 24}
	stdinR, stdinW := io.Pipe()
	var out bytes.Buffer
	done := make(chan struct{})
	var (
		code int
		err  error
	)
	go func() {
		defer close(done)
		code, err = c.ExecStream(context.Background(), "i-1", types.ExecRequest{Args: []string{"sh"}},
			types.Stdio{Stdin: stdinR, Stdout: &out, TTY: true, Resize: sizes})
	}()
	require.Eventually(t, func() bool { return len(core.Exec.Sizes()) == 1 }, 5*time.Second, 5*time.Millisecond)
	sizes <- types.TermSize{Cols: 132, Rows: 43}
	require.Eventually(t, func() bool { return len(core.Exec.Sizes()) == 2 }, 5*time.Second, 5*time.Millisecond)
	_, _ = stdinW.Write([]byte("ls\r"))
	require.NoError(t, stdinW.Close())
	<-done
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "ls\r", out.String())
	assert.Equal(t, []types.TermSize{{Cols: 80, Rows: 24}, {Cols: 132, Rows: 43}}, core.Exec.Sizes())
	call, _ := core.LastCall("ExecStream")
	assert.Equal(t, true, call.Args[2], "tty")
}

// A size sent before the call is the terminal's size from the start: the
// core finds it waiting when it is called.
func TestExecStreamInitialSize(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	atStart := core.Exec.SizeAtStart()
	sizes := make(chan types.TermSize, 1)
	sizes <- types.TermSize{Cols: 90, Rows: 30}
	code, err := c.ExecStream(context.Background(), "i-1", types.ExecRequest{Args: []string{"sh"}},
		types.Stdio{TTY: true, Resize: sizes})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, types.TermSize{Cols: 90, Rows: 30}, <-atStart)
}

func TestExecStreamErrors(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	core.Exec.ExecStreamFunc = func(_ context.Context, id string, _ types.ExecRequest, _ types.Stdio) (int, error) {
		return -1, errdefs.WithDetails(fmt.Errorf("instance %q is Paused: %w", id, errdefs.ErrFailedPrecondition),
			map[string]any{"state": "Paused"})
	}
	ctx := context.Background()
	_, err := c.ExecStream(ctx, "i-1", types.ExecRequest{Args: []string{"ls"}}, types.Stdio{})
	var e *types.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 409, e.Status)
	assert.Equal(t, map[string]any{"state": "Paused"}, e.Details)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

	wrong, err := client.New(c.BaseURL(), "wrong")
	require.NoError(t, err)
	_, err = wrong.ExecStream(ctx, "i-1", types.ExecRequest{Args: []string{"ls"}}, types.Stdio{})
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)

	_, err = c.ExecStream(ctx, "i-1", types.ExecRequest{}, types.Stdio{})
	assert.Error(t, err)
}
