package sshd

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
)

// loginScript runs a session's command the way sshd does: in the login
// shell of the user the instance runs as (from its /etc/passwd; /bin/sh
// when it names none or a missing one), with HOME, USER, LOGNAME and SHELL
// set and the home as the working directory. With an argument it runs
// `shell -c "$1"` (exec), without one a login shell (shell).
const loginScript = `u=$(id -u 2>/dev/null) || u=0
s= h= n=
if [ -r /etc/passwd ]; then
  while IFS=: read -r pn _ pu _ _ ph ps; do
    if [ "$pu" = "$u" ]; then n=$pn h=$ph s=$ps; break; fi
  done </etc/passwd
fi
if [ -z "$s" ] || [ ! -x "$s" ]; then s=/bin/sh; fi
if [ -z "$h" ] || [ ! -d "$h" ]; then h=/; fi
[ -n "$n" ] || n=$(id -un 2>/dev/null) || n=root
HOME=$h SHELL=$s USER=$n LOGNAME=$n
export HOME SHELL USER LOGNAME
cd "$h" 2>/dev/null
if [ $# -gt 0 ]; then exec "$s" -c "$1"; fi
exec "$s" -l
`

// allowedEnv reports whether a client's "env" request may set name:
// locale and terminal settings, and what VS Code's and JetBrains' remote
// clients send.
func allowedEnv(name string) bool {
	switch name {
	case "LANG", "LANGUAGE", "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TZ":
		return true
	}
	for _, prefix := range []string{"LC_", "VSCODE_", "REMOTE_CONTAINERS_", "JETBRAINS_"} {
		if strings.HasPrefix(name, prefix) && len(name) > len(prefix) {
			return true
		}
	}
	return false
}

// ptyRequest is the payload of "pty-req" (RFC 4254 6.2).
type ptyRequest struct {
	Term               string
	Cols, Rows, PW, PH uint32
	Modes              string
}

// windowChange is the payload of "window-change" (RFC 4254 6.7).
type windowChange struct {
	Cols, Rows, PW, PH uint32
}

// session serves one "session" channel: its environment and terminal
// requests, then one shell, exec or subsystem.
func (c *conn) session(ctx context.Context, nch ssh.NewChannel) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	defer func() { go ssh.DiscardRequests(reqs) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		env     []string
		tty     bool
		resize  chan types.TermSize
		started bool
		done    = make(chan struct{})
		mu      sync.Mutex // guards signal's process control
		signal  func(name string)
	)
	resize = make(chan types.TermSize, 1)
	for {
		var req *ssh.Request
		select {
		case req = <-reqs:
		case <-done:
			return
		}
		if req == nil {
			cancel()
			if started {
				<-done
			}
			return
		}
		ok := false
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if ssh.Unmarshal(req.Payload, &kv) == nil && !started && allowedEnv(kv.Name) && !strings.ContainsRune(kv.Value, 0) {
				env = append(env, kv.Name+"="+kv.Value)
				ok = true
			}
		case "pty-req":
			var pr ptyRequest
			if ssh.Unmarshal(req.Payload, &pr) == nil && !started {
				tty = true
				if pr.Term != "" && !strings.ContainsRune(pr.Term, 0) {
					env = append(env, "TERM="+pr.Term)
				}
				if pr.Cols > 0 && pr.Rows > 0 {
					sendSize(resize, pr.Cols, pr.Rows)
				}
				ok = true
			}
		case "window-change":
			var wc windowChange
			if ssh.Unmarshal(req.Payload, &wc) == nil && wc.Cols > 0 && wc.Rows > 0 {
				sendSize(resize, wc.Cols, wc.Rows)
				ok = true
			}
		case "signal":
			var sig struct{ Name string }
			if ssh.Unmarshal(req.Payload, &sig) == nil {
				mu.Lock()
				if signal != nil {
					signal(sig.Name)
					ok = true
				}
				mu.Unlock()
			}
		case "shell", "exec", "subsystem":
			if started {
				break
			}
			var cmd []string
			switch req.Type {
			case "shell":
				cmd = []string{"/bin/sh", "-c", loginScript, "envd-ssh"}
			case "exec":
				var ex struct{ Command string }
				if ssh.Unmarshal(req.Payload, &ex) != nil || strings.ContainsRune(ex.Command, 0) {
					break
				}
				cmd = []string{"/bin/sh", "-c", loginScript, "envd-ssh", ex.Command}
			case "subsystem":
				var sub struct{ Name string }
				if ssh.Unmarshal(req.Payload, &sub) != nil || sub.Name != "sftp" {
					break
				}
				// A session holds one of the tenant's (and the node's)
				// SFTP slots; past them it is refused before it starts,
				// with the reason on stderr.
				release, err := c.s.core.Admit(c.p, types.AdmitSFTP)
				if err != nil {
					fmt.Fprintf(ch.Stderr(), "envd: sftp: %v\r\n", err)
					if req.WantReply {
						_ = req.Reply(false, nil)
					}
					return
				}
				started, ok = true, true
				_ = req.Reply(true, nil)
				go func() {
					defer close(done)
					defer release()
					c.sftp(ctx, ch)
				}()
				continue
			}
			if cmd == nil {
				break
			}
			started, ok = true, true
			_ = req.Reply(true, nil)
			var input io.Reader = touchReader{ch, c}
			pctx, kill := context.WithCancel(ctx)
			stdin, stdinW := io.Pipe()
			mu.Lock()
			signal = func(name string) {
				// The core's exec has no signal delivery: on a terminal,
				// INT and QUIT are its control characters (the line
				// discipline signals the foreground group); otherwise a
				// terminating signal ends the process (SIGKILL).
				if tty && (name == "INT" || name == "QUIT") {
					b := byte(0x03)
					if name == "QUIT" {
						b = 0x1c
					}
					go func() { _, _ = stdinW.Write([]byte{b}) }()
					return
				}
				switch name {
				case "INT", "TERM", "KILL", "HUP", "QUIT", "PIPE", "USR1", "USR2", "ALRM":
					kill()
				}
			}
			mu.Unlock()
			go func() {
				_, err := io.Copy(stdinW, input)
				if tty && err == nil {
					// As OpenSSH's sshd: the client's EOF does not reach a
					// terminal (closing it would hang up the shell before
					// it read its input); the user types ^D.
					return
				}
				_ = stdinW.CloseWithError(err)
			}()
			stdio := types.Stdio{Stdin: stdin, Stdout: ch, Stderr: ch.Stderr(), TTY: tty}
			if tty {
				stdio.Resize = resize
			}
			go func() {
				defer close(done)
				defer kill()
				code := c.run(pctx, types.ExecRequest{Args: cmd, Env: env}, stdio, ch)
				_ = stdin.CloseWithError(io.ErrClosedPipe)
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(code)))
				_ = ch.CloseWrite()
				_ = ch.Close()
			}()
			continue
		case "keepalive@openssh.com":
			ok = false // answered, so the client's keep-alive sees the server alive
		default:
			// x11-req, auth-agent-req@openssh.com, ...: not offered.
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
}

// run takes an exec slot of the tenant (the same limit as the exec
// routes), wakes the instance and runs the command; an error goes to the
// client's stderr and the exit status is 255, as OpenSSH's for a failure
// of its own.
func (c *conn) run(ctx context.Context, req types.ExecRequest, stdio types.Stdio, ch ssh.Channel) int {
	release, err := c.s.core.Admit(c.p, types.AdmitExec)
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "envd: %v\r\n", err)
		return 255
	}
	defer release()
	if err := c.wake(ctx); err != nil {
		fmt.Fprintf(ch.Stderr(), "envd: %v\r\n", err)
		return 255
	}
	code, err := c.s.core.ExecStream(ctx, c.p, c.instance, req, stdio)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(ch.Stderr(), "envd: %v\r\n", err)
		}
		return 255
	}
	if code < 0 {
		return 255
	}
	return code
}

// sendSize queues a terminal size, replacing one not yet taken.
func sendSize(ch chan types.TermSize, cols, rows uint32) {
	sz := types.TermSize{Cols: uint16(min(cols, 65535)), Rows: uint16(min(rows, 65535))}
	for {
		select {
		case ch <- sz:
			return
		default:
			select {
			case <-ch:
			default:
			}
		}
	}
}

// touchReader records activity on the instance at every read of input.
type touchReader struct {
	r io.Reader
	c *conn
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.c.s.core.TouchInstance(t.c.instance)
	}
	return n, err
}
