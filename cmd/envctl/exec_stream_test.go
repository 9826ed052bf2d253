package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/syncbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/apitest"
)

// openPTY returns a new pseudo-terminal's master and its terminal side.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// miniShell is a fake interactive command: it reads lines ending in \r or
// \n, answers "echo X" with X, "exit N" by exiting N; it records the
// terminal sizes it gets.
type miniShell struct {
	mu    sync.Mutex
	sizes []types.TermSize
}

func (sh *miniShell) run(ctx context.Context, _ string, _ types.ExecRequest, stdio types.Stdio) (int, error) {
	go func() {
		for sz := range stdio.Resize {
			sh.mu.Lock()
			sh.sizes = append(sh.sizes, sz)
			sh.mu.Unlock()
		}
	}()
	fmt.Fprint(stdio.Stdout, "$ ")
	br := bufio.NewReader(stdio.Stdin)
	var line []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, nil
		}
		if b != '\r' && b != '\n' {
			line = append(line, b)
			continue
		}
		cmd := string(line)
		line = line[:0]
		if arg, ok := strings.CutPrefix(cmd, "echo "); ok {
			fmt.Fprintf(stdio.Stdout, "%s\r\n$ ", arg)
		}
		var code int
		if _, err := fmt.Sscanf(cmd, "exit %d", &code); err == nil {
			return code, nil
		}
	}
}

func (sh *miniShell) Sizes() []types.TermSize {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]types.TermSize(nil), sh.sizes...)
}

// TestExecInteractiveTTY drives envctl exec -it on a pseudo-terminal as a
// user would: type, read, resize, exit.
func TestExecInteractiveTTY(t *testing.T) {
	t.Parallel()
	sh := &miniShell{}
	core, env := server(t, func(core *apitest.Fakes) { core.Exec.ExecStreamFunc = sh.run })
	master, tty := openPTY(t)
	require.NoError(t, unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 90}))
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	require.NotZero(t, before.Lflag&unix.ECHO)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, envctlBin, "exec", "-it", "i-1", "--", "bash", "-l")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	var out syncbuf.Buffer
	go func() { _, _ = io.Copy(&out, master) }()
	waitFor := func(s string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), s) }, 10*time.Second, 10*time.Millisecond,
			"waiting for %q in %q", s, out.String())
	}

	waitFor("$ ")
	require.Eventually(t, func() bool { return len(sh.Sizes()) >= 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, types.TermSize{Cols: 90, Rows: 30}, sh.Sizes()[0], "the initial size is the local terminal's")
	// Raw mode: the local terminal neither echoes nor turns \r into \n.
	_, err = master.Write([]byte("echo hi\r"))
	require.NoError(t, err)
	waitFor("hi\r\n$ ")
	assert.NotContains(t, out.String(), "echo hi", "the local terminal must not echo in raw mode")

	// A resize of the local terminal (the kernel sends SIGWINCH) follows.
	require.NoError(t, unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 160}))
	require.Eventually(t, func() bool {
		s := sh.Sizes()
		return len(s) >= 2 && s[len(s)-1] == types.TermSize{Cols: 160, Rows: 50}
	}, 5*time.Second, 10*time.Millisecond, "sizes %v", sh.Sizes())

	_, err = master.Write([]byte("exit 5\r"))
	require.NoError(t, err)
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "output %q", out.String())
	assert.Equal(t, 5, ee.ExitCode())

	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.Equal(t, before.Lflag, after.Lflag, "the terminal is restored")
	assert.Equal(t, before.Iflag, after.Iflag, "the terminal is restored")
	call, _ := core.LastCall("ExecStream")
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"bash", "-l"}}, true}, call.Args)
}

func TestExecInteractiveStreamsStdin(t *testing.T) {
	t.Parallel()
	core, env := server(t, func(core *apitest.Fakes) {
		core.Exec.ExecStreamFunc = func(_ context.Context, _ string, _ types.ExecRequest, stdio types.Stdio) (int, error) {
			b, err := io.ReadAll(stdio.Stdin)
			if err != nil {
				return -1, err
			}
			fmt.Fprintf(stdio.Stdout, "got %d bytes", len(b))
			fmt.Fprint(stdio.Stderr, "to stderr")
			return 3, nil
		}
	})
	big := strings.Repeat("x", 2<<20) // past the 960 KiB of a non-interactive exec
	r := envctl(t, env, strings.NewReader(big), "exec", "-i", "i-1", "--", "wc", "-c")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("got %d bytes", len(big)), r.stdout)
	assert.Equal(t, "to stderr", r.stderr)
	call, _ := core.LastCall("ExecStream")
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"wc", "-c"}}, false}, call.Args)
}
