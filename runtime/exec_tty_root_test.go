package runtime

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/syncbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootExecTTYResizeAndInterrupt runs an interactive shell on a TTY, as
// envctl exec -it does: the terminal takes the sizes sent on Resize, and a
// 0x03 byte on stdin interrupts the foreground command (SIGINT through the
// terminal's line discipline), not the session.
func TestRootExecTTYResizeAndInterrupt(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	env.create(t, InstanceSpec{ID: "tty-resize"})

	stdinR, stdinW := io.Pipe()
	resize := make(chan TermSize, 1)
	resize <- TermSize{Cols: 100, Rows: 40}
	var out syncbuf.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	go func() {
		code, err := env.rt.Exec(ctx, "tty-resize", ExecSpec{Args: []string{"sh"}, TTY: true,
			Stdin: stdinR, Stdout: &out, Resize: resize})
		done <- result{code, err}
	}()
	// The shell echoes what is typed, so each expected output is spelled
	// differently from the command that prints it.
	waitFor := func(s string, within time.Duration) {
		t.Helper()
		if !assert.Eventually(t, func() bool { return strings.Contains(out.String(), s) }, within, 20*time.Millisecond, "waiting for %q", s) {
			t.Fatalf("output: %q", out.String())
		}
	}
	typeLine := func(s string) {
		t.Helper()
		_, err := stdinW.Write([]byte(s))
		require.NoError(t, err)
	}

	typeLine("echo size=$(stty size)\n")
	waitFor("size=40 100", 10*time.Second)

	// A later size is applied as it arrives, like a SIGWINCH, in no order
	// with stdin: ask until the terminal has it.
	resize <- TermSize{Cols: 132, Rows: 43}
	require.Eventually(t, func() bool {
		if strings.Contains(out.String(), "size=43 132") {
			return true
		}
		typeLine("echo size=$(stty size)\n")
		return false
	}, 15*time.Second, 300*time.Millisecond, "the resize was not applied: %q", out.String())

	// An interrupted command ends the shell's command line, so its status
	// is asked for on the next one.
	typeLine("echo sl''eeping; sleep 30\n")
	waitFor("sleeping", 10*time.Second)
	// ^C before sleep runs would interrupt the shell's reading instead.
	require.Eventually(t, func() bool {
		_, _, code := env.run(t, "tty-resize", "pidof", "sleep")
		return code == 0
	}, 15*time.Second, 100*time.Millisecond, "sleep started")
	interrupted := time.Now()
	typeLine("\x03")
	waitFor("^C", 5*time.Second)
	typeLine("echo rc=$?\n")
	waitFor("rc=130", 5*time.Second)
	assert.Less(t, time.Since(interrupted), 5*time.Second, "Ctrl-C must interrupt sleep")

	typeLine("exit 3\n")
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.Equal(t, 3, r.code, "output %q", out.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("the shell did not exit; output %q", out.String())
	}
	assert.Less(t, time.Since(start), 25*time.Second, "sleep 30 must not have run to its end")
}
