//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/syncbuf"
	"github.com/envd-dev/envd/runtime/agent"
)

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

// listen listens on a new unix socket in a temporary directory.
func listen(t testing.TB) (net.Listener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

func accept(t testing.TB, ln net.Listener) *agent.Conn {
	t.Helper()
	nc, err := ln.Accept()
	require.NoError(t, err)
	c, err := agent.NewConn(nc)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// startAgent runs agent.Run against a new socket, as envd-agent does, and
// returns the host's side of its connection.
func startAgent(t testing.TB, opts agent.ServeOptions) *agent.Conn {
	t.Helper()
	ln, path := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- agent.Run(ctx, path, opts) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-ran, context.Canceled)
	})
	return accept(t, ln)
}

// signalWriter signals on its channel when the first bytes are written.
type signalWriter struct {
	syncbuf.Buffer
	once  sync.Once
	wrote chan struct{}
}

func newSignalWriter() *signalWriter { return &signalWriter{wrote: make(chan struct{})} }

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	w.once.Do(func() { close(w.wrote) })
	return n, err
}

func TestExec(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	dir := t.TempDir()
	script := filepath.Join(dir, "hello.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho hello from $PWD\n"), 0o755))
	garbage := filepath.Join(dir, "garbage")
	require.NoError(t, os.WriteFile(garbage, []byte{0x7f, 'E', 'L', 'F', 0, 1, 2}, 0o755))
	badInterp := filepath.Join(dir, "badinterp")
	require.NoError(t, os.WriteFile(badInterp, []byte("#!/nonexistent/sh\n"), 0o755))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))

	for _, tc := range []struct {
		name     string
		req      agent.Request
		code     int
		stdout   string
		stderr   string
		cmdErr   *agent.CommandError
		startErr string // a part of StartError's reason
	}{
		{
			name:   "stdout, stderr and exit code",
			req:    agent.Request{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Env: testEnv},
			code:   3,
			stdout: "out\n",
			stderr: "err\n",
		},
		{
			name:   "env replaces the agent's",
			req:    agent.Request{Args: []string{"env"}, Env: []string{"PATH=/usr/bin:/bin", "X=y"}},
			stdout: "PATH=/usr/bin:/bin\nX=y\n",
		},
		{
			name:   "empty env",
			req:    agent.Request{Args: []string{"/usr/bin/env"}},
			stdout: "",
		},
		{
			name:   "shell sees env",
			req:    agent.Request{Args: []string{"sh", "-c", "echo $X"}, Env: []string{"X=y", "PATH=/bin"}},
			stdout: "y\n",
		},
		{
			name:   "default PATH without one in env",
			req:    agent.Request{Args: []string{"true"}},
			stdout: "",
		},
		{
			name:   "cwd",
			req:    agent.Request{Args: []string{"pwd"}, Env: testEnv, Cwd: "/usr/share"},
			stdout: "/usr/share\n",
		},
		{
			name:   "empty cwd is /",
			req:    agent.Request{Args: []string{"pwd"}, Env: testEnv},
			stdout: "/\n",
		},
		{
			name:   "relative path from cwd",
			req:    agent.Request{Args: []string{"./hello.sh"}, Env: testEnv, Cwd: dir},
			stdout: "hello from " + dir + "\n",
		},
		{
			name:   "stdin copied, EOF seen",
			req:    agent.Request{Args: []string{"cat"}, Env: testEnv, Stdin: strings.NewReader("in\nput")},
			stdout: "in\nput",
		},
		{
			name:   "no stdin reads EOF at once",
			req:    agent.Request{Args: []string{"sh", "-c", "cat; echo done"}, Env: testEnv},
			stdout: "done\n",
		},
		{
			name: "killed by a signal",
			req:  agent.Request{Args: []string{"sh", "-c", "kill -TERM $$"}, Env: testEnv},
			code: 128 + int(syscall.SIGTERM),
		},
		{
			name:   "not found in PATH",
			req:    agent.Request{Args: []string{"nosuch-command"}, Env: testEnv},
			code:   127,
			cmdErr: &agent.CommandError{Code: 127, Message: "nosuch-command: executable file not found in $PATH"},
		},
		{
			name:   "a directory in PATH is skipped",
			req:    agent.Request{Args: []string{"share"}, Env: []string{"PATH=/usr"}},
			code:   127,
			cmdErr: &agent.CommandError{Code: 127, Message: "share: executable file not found in $PATH"},
		},
		{
			name:   "absolute path missing",
			req:    agent.Request{Args: []string{"/does/not/exist"}, Env: testEnv},
			code:   127,
			cmdErr: &agent.CommandError{Code: 127, Message: "/does/not/exist: no such file or directory"},
		},
		{
			name:   "relative path missing",
			req:    agent.Request{Args: []string{"./nosuch"}, Env: testEnv, Cwd: dir},
			code:   127,
			cmdErr: &agent.CommandError{Code: 127, Message: "./nosuch: no such file or directory"},
		},
		{
			name:   "not executable",
			req:    agent.Request{Args: []string{"/etc/passwd"}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: "/etc/passwd: permission denied"},
		},
		{
			name:   "a directory",
			req:    agent.Request{Args: []string{"/tmp"}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: "/tmp: is a directory"},
		},
		{
			name:   "exec format error",
			req:    agent.Request{Args: []string{garbage}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: garbage + ": exec format error"},
		},
		{
			name:   "interpreter missing",
			req:    agent.Request{Args: []string{badInterp}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: badInterp + ": no such file or directory"},
		},
		{
			name:   "symlink loop",
			req:    agent.Request{Args: []string{loop}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: loop + ": too many levels of symbolic links"},
		},
		{
			name:   "not a directory",
			req:    agent.Request{Args: []string{"/etc/passwd/x"}, Env: testEnv},
			code:   126,
			cmdErr: &agent.CommandError{Code: 126, Message: "/etc/passwd/x: not a directory"},
		},
		{
			name:     "cwd missing",
			req:      agent.Request{Args: []string{"true"}, Env: testEnv, Cwd: "/nope"},
			code:     -1,
			startErr: `chdir to cwd "/nope": no such file or directory`,
		},
		{
			name:     "cwd a file",
			req:      agent.Request{Args: []string{"true"}, Env: testEnv, Cwd: "/etc/passwd"},
			code:     -1,
			startErr: `chdir to cwd "/etc/passwd": not a directory`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			req := tc.req
			req.Stdout, req.Stderr = &stdout, &stderr
			code, err := c.Exec(context.Background(), req)
			assert.Equal(t, tc.code, code)
			switch {
			case tc.cmdErr != nil:
				var ce *agent.CommandError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, tc.cmdErr, ce)
				assert.Equal(t, tc.cmdErr.Message, err.Error())
			case tc.startErr != "":
				var se *agent.StartError
				require.ErrorAs(t, err, &se)
				assert.Contains(t, se.Reason, tc.startErr)
			default:
				require.NoError(t, err)
			}
			assert.Equal(t, tc.stdout, stdout.String())
			assert.Equal(t, tc.stderr, stderr.String())
		})
	}
}

// zeros is an endless stdin.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestExecStdin(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})

	t.Run("large input round trip", func(t *testing.T) {
		t.Parallel()
		in := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
		var out bytes.Buffer
		code, err := c.Exec(context.Background(), agent.Request{Args: []string{"cat"}, Env: testEnv, Stdin: bytes.NewReader(in), Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.True(t, bytes.Equal(in, out.Bytes()), "output of %d bytes differs from the input", out.Len())
	})
	t.Run("endless input not read", func(t *testing.T) {
		t.Parallel()
		code, err := c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Env: testEnv, Stdin: zeros{}})
		require.NoError(t, err)
		assert.Equal(t, 0, code)
	})
	t.Run("kill while stdin is blocked", func(t *testing.T) {
		t.Parallel()
		// The process never reads, so its stdin pipe is full: a Kill must
		// still get through.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		code, err := c.Exec(ctx, agent.Request{Args: []string{"sleep", "30"}, Env: testEnv, Stdin: zeros{}})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 128+9, code)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
}

func TestExecCanceled(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	out := newSignalWriter()
	go func() {
		<-out.wrote
		cancel()
	}()
	start := time.Now()
	code, err := c.Exec(ctx, agent.Request{Args: []string{"sh", "-c", "echo ready; exec sleep 30"}, Env: testEnv, Stdout: out})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 128+9, code)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, "ready\n", out.String())

	_, err = c.Exec(ctx, agent.Request{Args: []string{"true"}, Env: testEnv})
	assert.ErrorIs(t, err, context.Canceled, "a canceled ctx runs nothing")
}

func TestExecBackgroundChildDrain(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	c := startAgent(t, agent.ServeOptions{DrainGrace: grace})
	var out bytes.Buffer
	start := time.Now()
	code, err := c.Exec(context.Background(), agent.Request{Args: []string{"sh", "-c", "sleep 31 & echo $!"}, Env: testEnv, Stdout: &out})
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.GreaterOrEqual(t, elapsed, grace)
	assert.Less(t, elapsed, grace+10*time.Second)

	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	assert.NoError(t, syscall.Kill(pid, 0), "the background sleep runs on")
	assert.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
}

// slowWriter blocks on its first write.
type slowWriter struct {
	bytes.Buffer
	delay time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if w.Len() == 0 {
		time.Sleep(w.delay)
	}
	return w.Buffer.Write(p)
}

func TestExecDrainWithSlowHost(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	c := startAgent(t, agent.ServeOptions{DrainGrace: grace})
	// The shell exits at once; its background child writes more than the
	// socket holds while the host does not read for longer than the grace:
	// that is not a pause of the output, on stdout or stderr: all of it
	// arrives.
	const size = 4 << 20
	out := &slowWriter{delay: 3 * grace}
	var errOut syncbuf.Buffer
	code, err := c.Exec(context.Background(), agent.Request{
		Args:   []string{"sh", "-c", fmt.Sprintf("(head -c %d /dev/zero; echo end >&2) & exit 0", size)},
		Env:    testEnv,
		Stdout: out,
		Stderr: &errOut,
	})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, size, out.Len())
	assert.Equal(t, "end\n", errOut.String())
}

func TestExecLargeOutput(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	const size = 8 << 20
	var out, errOut bytes.Buffer
	code, err := c.Exec(context.Background(), agent.Request{
		Args:   []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero | tr '\\0' e >&2", size, size)},
		Env:    testEnv,
		Stdout: &out,
		Stderr: &errOut,
	})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, size, out.Len())
	assert.Equal(t, size, errOut.Len())
	assert.True(t, bytes.Equal(make([]byte, size), out.Bytes()))
	assert.True(t, bytes.Equal(bytes.Repeat([]byte{'e'}, size), errOut.Bytes()))
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestExecWriterFails(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	var errOut bytes.Buffer
	code, err := c.Exec(context.Background(), agent.Request{
		Args:   []string{"sh", "-c", "seq 100000; echo err >&2; exit 4"},
		Env:    testEnv,
		Stdout: failingWriter{},
		Stderr: &errOut,
	})
	require.NoError(t, err)
	assert.Equal(t, 4, code)
	assert.Equal(t, "err\n", errOut.String())
}

func TestExecConcurrent(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var out, errOut bytes.Buffer
			code, err := c.Exec(context.Background(), agent.Request{
				Args:   []string{"sh", "-c", `for j in 1 2 3; do echo "out $1 $j"; echo "err $1 $j" >&2; done; exit $1`, "sh", strconv.Itoa(i)},
				Env:    testEnv,
				Stdout: &out,
				Stderr: &errOut,
			})
			if assert.NoError(t, err) {
				assert.Equal(t, i, code)
				assert.Equal(t, fmt.Sprintf("out %d 1\nout %d 2\nout %d 3\n", i, i, i), out.String())
				assert.Equal(t, fmt.Sprintf("err %d 1\nerr %d 2\nerr %d 3\n", i, i, i), errOut.String())
			}
		})
	}
	wg.Wait()
}

func TestExecAgentDies(t *testing.T) {
	t.Parallel()
	ln, path := listen(t)
	agentSide, err := net.Dial("unix", path)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- agent.Serve(context.Background(), agentSide, agent.ServeOptions{}) }()
	c := accept(t, ln)

	out := newSignalWriter()
	go func() {
		<-out.wrote
		agentSide.Close()
	}()
	code, err := c.Exec(context.Background(), agent.Request{Args: []string{"sh", "-c", "echo ready; exec sleep 30"}, Env: testEnv, Stdout: out})
	assert.ErrorIs(t, err, agent.ErrLost)
	assert.Equal(t, -1, code)
	<-served
	<-c.Done()

	_, err = c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Env: testEnv})
	assert.ErrorIs(t, err, agent.ErrNotSent)
}

func TestConnCloseKillsCommands(t *testing.T) {
	t.Parallel()
	c := startAgent(t, agent.ServeOptions{})
	out := newSignalWriter()
	go func() {
		<-out.wrote
		c.Close()
	}()
	_, err := c.Exec(context.Background(), agent.Request{Args: []string{"sh", "-c", "echo $$; exec sleep 30"}, Env: testEnv, Stdout: out})
	assert.ErrorIs(t, err, agent.ErrLost)
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	// The agent killed and reaped it.
	assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }, 5*time.Second, 10*time.Millisecond)
}

func frame(typ byte, id uint32, payload []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], id)
	binary.BigEndian.PutUint32(b[5:], uint32(len(payload)))
	return append(b, payload...)
}

const (
	typeHello  = 1
	typeStart  = 2
	typeStdout = 8
	typeExit   = 10
)

func hello(version int) []byte {
	return frame(typeHello, 0, []byte(fmt.Sprintf(`{"version":%d,"pid":42}`, version)))
}

// fakeAgent connects to the listener and writes the given bytes, as a
// hostile program in the container could.
func fakeAgent(t *testing.T, path string) net.Conn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return nc
}

func TestNewConnRejects(t *testing.T) {
	t.Parallel()
	oversized := frame(typeHello, 0, nil)
	binary.BigEndian.PutUint32(oversized[5:], agent.MaxFrame+1)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"wrong version", hello(2)},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"oversized frame", oversized},
		{"4 GiB frame", append([]byte{typeHello, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff)},
		{"not json", frame(typeHello, 0, []byte("{"))},
		{"other frame first", frame(typeExit, 1, []byte(`{"code":0}`))},
		{"closed at once", nil},
		{"cut hello", hello(1)[:12]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, path := listen(t)
			nc := fakeAgent(t, path)
			_, err := nc.Write(tc.send)
			require.NoError(t, err)
			require.NoError(t, nc.(*net.UnixConn).CloseWrite())
			hostSide, err := ln.Accept()
			require.NoError(t, err)
			c, err := agent.NewConn(hostSide)
			assert.Error(t, err)
			assert.Nil(t, c)
		})
	}
}

func TestConnHostilePeer(t *testing.T) {
	t.Parallel()
	oversized := frame(typeStdout, 1, nil)
	binary.BigEndian.PutUint32(oversized[5:], agent.MaxFrame+1)
	for _, tc := range []struct {
		name  string
		reply []byte // after reading the Start frame of exec 1
	}{
		{"oversized frame", oversized},
		{"unknown id and type, then oversized", append(append(append(
			frame(typeStdout, 999, []byte("not yours")),
			frame(200, 1, []byte("?"))...),
			frame(typeStdout, 1, []byte("mine\n"))...),
			oversized...)},
		{"bad exit", frame(typeExit, 1, []byte(`{"code":"x"}`))},
		{"exit code out of range", frame(typeExit, 1, []byte(`{"code":1e100}`))},
		{"bad stdin ack", frame(11, 1, []byte{1})},
		{"cut frame", frame(typeStdout, 1, []byte("abc"))[:10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, path := listen(t)
			nc := fakeAgent(t, path)
			_, err := nc.Write(hello(1))
			require.NoError(t, err)
			c := accept(t, ln)
			assert.Equal(t, 42, c.PID())

			go func() {
				// Read the Start frame, then reply.
				var hdr [9]byte
				if _, err := io.ReadFull(nc, hdr[:]); err != nil || hdr[0] != typeStart {
					return
				}
				if _, err := io.CopyN(io.Discard, nc, int64(binary.BigEndian.Uint32(hdr[5:]))); err != nil {
					return
				}
				_, _ = nc.Write(tc.reply)
				_ = nc.(*net.UnixConn).CloseWrite()
			}()
			var out bytes.Buffer
			code, err := c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Stdout: &out})
			assert.ErrorIs(t, err, agent.ErrLost)
			assert.Equal(t, -1, code)
			assert.NotContains(t, out.String(), "not yours")
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the connection did not end")
			}
		})
	}
}

func TestConnIgnoresUnknownIDs(t *testing.T) {
	t.Parallel()
	ln, path := listen(t)
	nc := fakeAgent(t, path)
	_, err := nc.Write(hello(1))
	require.NoError(t, err)
	c := accept(t, ln)
	go func() {
		var hdr [9]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			return
		}
		id := binary.BigEndian.Uint32(hdr[1:])
		_, _ = io.CopyN(io.Discard, nc, int64(binary.BigEndian.Uint32(hdr[5:])))
		var b []byte
		b = append(b, frame(typeStdout, id+1, []byte("not yours"))...)
		b = append(b, frame(typeStdout, id, []byte("mine"))...)
		b = append(b, frame(typeExit, id+7, []byte(`{"code":5}`))...)
		b = append(b, frame(typeExit, id, []byte(`{"code":6}`))...)
		_, _ = nc.Write(b)
	}()
	var out bytes.Buffer
	code, err := c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 6, code)
	assert.Equal(t, "mine", out.String())
}

func TestServeRefusesDuplicateID(t *testing.T) {
	t.Parallel()
	ln, path := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = agent.Run(ctx, path, agent.ServeOptions{}) }()
	hostSide, err := ln.Accept()
	require.NoError(t, err)
	defer hostSide.Close()

	read := func() (byte, uint32, []byte) {
		var hdr [9]byte
		_, err := io.ReadFull(hostSide, hdr[:])
		require.NoError(t, err)
		p := make([]byte, binary.BigEndian.Uint32(hdr[5:]))
		_, err = io.ReadFull(hostSide, p)
		require.NoError(t, err)
		return hdr[0], binary.BigEndian.Uint32(hdr[1:]), p
	}
	typ, _, _ := read()
	require.Equal(t, byte(typeHello), typ)
	start, err := json.Marshal(map[string]any{"args": []string{"sleep", "30"}, "env": testEnv})
	require.NoError(t, err)
	_, err = hostSide.Write(append(frame(typeStart, 5, start), frame(typeStart, 5, start)...))
	require.NoError(t, err)
	for {
		typ, id, p := read()
		if typ == 7 { // StartFailed
			assert.Equal(t, uint32(5), id)
			assert.JSONEq(t, `{"code":0,"message":"duplicate exec id","process":true}`, string(p))
			break
		}
	}
	// Closing the connection kills the sleep; the agent redials.
	hostSide.Close()
	c := accept(t, ln)
	code, err := c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Env: testEnv})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
}

func TestRunRedials(t *testing.T) {
	t.Parallel()
	ln, path := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- agent.Run(ctx, path, agent.ServeOptions{}) }()
	defer func() {
		cancel()
		assert.ErrorIs(t, <-ran, context.Canceled)
	}()

	c := accept(t, ln)
	pid := c.PID()
	assert.Equal(t, os.Getpid(), pid)
	code, err := c.Exec(context.Background(), agent.Request{Args: []string{"true"}, Env: testEnv})
	require.NoError(t, err)
	assert.Equal(t, 0, code)

	// The host goes away: connection and listener (which removes the
	// socket), and comes back at the same path a little later.
	require.NoError(t, c.Close())
	require.NoError(t, ln.Close())
	time.Sleep(300 * time.Millisecond)
	ln2, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer ln2.Close()
	c2 := accept(t, ln2)
	var out bytes.Buffer
	code, err = c2.Exec(context.Background(), agent.Request{Args: []string{"echo", "again"}, Env: testEnv, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "again\n", out.String())
}

func BenchmarkExecTrue(b *testing.B) {
	c := startAgent(b, agent.ServeOptions{})
	req := agent.Request{Args: []string{"/bin/true"}, Env: testEnv}
	for b.Loop() {
		if code, err := c.Exec(context.Background(), req); err != nil || code != 0 {
			b.Fatalf("exec: %d, %v", code, err)
		}
	}
}
