package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseIDs reads an operation's event stream from after lastID to its end
// and returns the ids of the events, in order.
func sseIDs(t *testing.T, opID string, lastID int) []int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), "GET", env.node.URL+"/v1/operations/"+opID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.node.Token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var ids []int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			ids = append(ids, n)
		}
		if line == "event: end" {
			break
		}
	}
	return ids
}

// An operation's events survive an envd restart in order; a client that
// reconnects with Last-Event-ID gets exactly the events after it.
func TestRootEventStreamResumesAcrossRestart(t *testing.T) {
	p := newProject(t, "sse")
	a := up(t, p, 0)
	mustSh(t, a.ID, "dd if=/dev/urandom of=/blob bs=1M count=30 2>/dev/null")
	op, err := env.c.Save(ctx(t), a.ID, types.SaveRequest{Message: "streamed"}, "")
	require.NoError(t, err)
	restartNode(t) // the stream's server goes away mid-operation

	all := sseIDs(t, op.ID, 0)
	require.NotEmpty(t, all)
	for i, id := range all {
		assert.Equal(t, i+1, id, "ids are 1..n without gaps or duplicates: %v", all)
	}
	for _, from := range []int{1, len(all) / 2, len(all) - 1} {
		got := sseIDs(t, op.ID, from)
		assert.Equal(t, all[from:], got, "resuming after %d", from)
	}
	done, err := env.c.GetOperation(ctx(t), op.ID)
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, done.State)
}

// lineWriter collects output for a test that waits for a string in it.
type lineWriter struct {
	ch chan string
}

func (w lineWriter) Write(b []byte) (int, error) {
	w.ch <- string(b)
	return len(b), nil
}

// An interactive terminal on a real instance: the size is the client's,
// ^C interrupts the foreground command, the exit code comes back.
func TestRootInteractiveTerminal(t *testing.T) {
	t.Parallel()
	p := newProject(t, "tty")
	in := up(t, p, 0)
	stdinR, stdinW := io.Pipe()
	out := lineWriter{ch: make(chan string, 1024)}
	resize := make(chan types.TermSize, 2)
	resize <- types.TermSize{Cols: 100, Rows: 40}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		code, err := env.c.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh"}},
			types.Stdio{Stdin: stdinR, Stdout: out, TTY: true, Resize: resize})
		done <- result{code, err}
	}()
	var seen strings.Builder
	waitFor := func(s string) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for !strings.Contains(seen.String(), s) {
			select {
			case chunk := <-out.ch:
				seen.WriteString(chunk)
			case <-deadline:
				t.Fatalf("waiting for %q; terminal so far: %q", s, seen.String())
			}
		}
	}
	write := func(s string) {
		_, err := stdinW.Write([]byte(s))
		require.NoError(t, err)
	}
	// The size sent before the call is the terminal's from the start.
	write("echo size=$(stty size)\n")
	waitFor("size=40 100")
	// A later size is applied as it arrives, like a SIGWINCH, in no order
	// with stdin: ask until the terminal has it.
	resize <- types.TermSize{Cols: 132, Rows: 43}
	asked := time.Now()
	for !strings.Contains(seen.String(), "size=43 132") {
		require.Less(t, time.Since(asked), 15*time.Second, "the resize was not applied; terminal so far: %q", seen.String())
		write("echo size=$(stty size)\n")
		for quiet := time.After(500 * time.Millisecond); ; {
			select {
			case chunk := <-out.ch:
				seen.WriteString(chunk)
				continue
			case <-quiet:
			}
			break
		}
	}
	start := time.Now()
	write("sleep 30\n")
	// ^C before sleep runs would interrupt the shell's reading instead.
	// Not `pidof sleep`: the instance's init always has a `sleep 3600`.
	// The pattern's [0] keeps the checking shell from matching itself.
	require.Eventually(t, func() bool {
		return sh(t, in.ID, `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\000' ' ' | grep -q 'sleep 3[0] '`).ExitCode == 0
	}, 15*time.Second, 100*time.Millisecond, "sleep started")
	write("\x03") // ^C
	write("echo rc=$?\n")
	waitFor("rc=130")
	assert.Less(t, time.Since(start), 10*time.Second, "^C interrupted the sleep")
	write("exit 7\n")
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.Equal(t, 7, r.code)
	case <-time.After(15 * time.Second):
		t.Fatal("the session did not end")
	}
}
