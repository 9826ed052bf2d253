package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/envd-dev/envd/api/types"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

// execStream runs exec -i/-t: the command's streams connected live to
// envctl's, the local terminal raw while a remote one is attached.
func (a *app) execStream(ctx context.Context, c *client.Client, id string, req types.ExecRequest, stdin, tty bool) error {
	stdio := types.Stdio{Stdout: a.stdout, Stderr: a.stderr, TTY: tty}
	if stdin {
		stdio.Stdin = a.stdin
	}
	if tty {
		if in, ok := terminalFd(a.stdin); ok && stdin {
			old, err := term.MakeRaw(in)
			if err != nil {
				return err
			}
			defer func() { _ = term.Restore(in, old) }()
		}
		resize := make(chan types.TermSize, 1)
		stdio.Resize = resize
		sizeOf := a.terminalSize()
		if sz, ok := sizeOf(); ok {
			resize <- sz
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-winch:
					if sz, ok := sizeOf(); ok {
						sendLatest(resize, sz)
					}
				case <-done:
					return
				}
			}
		}()
	}
	code, err := c.ExecStream(ctx, id, req, stdio)
	if err != nil {
		return err
	}
	if code != 0 {
		if code < 0 || code > 255 {
			code = exitError
		}
		return &exitCodeError{code: code}
	}
	return nil
}

// terminalSize returns a function reading the local terminal's size from
// stdout, stdin or stderr, whichever is a terminal.
func (a *app) terminalSize() func() (types.TermSize, bool) {
	for _, f := range []any{a.stdout, a.stdin, a.stderr} {
		if fd, ok := terminalFd(f); ok {
			return func() (types.TermSize, bool) {
				w, h, err := term.GetSize(fd)
				if err != nil || w <= 0 || h <= 0 {
					return types.TermSize{}, false
				}
				return types.TermSize{Cols: uint16(w), Rows: uint16(h)}, true
			}
		}
	}
	return func() (types.TermSize, bool) { return types.TermSize{}, false }
}

func terminalFd(f any) (int, bool) {
	file, ok := f.(*os.File)
	if !ok || !term.IsTerminal(int(file.Fd())) {
		return 0, false
	}
	return int(file.Fd()), true
}

// sendLatest puts sz on ch (buffer one), replacing a size not taken yet.
func sendLatest(ch chan types.TermSize, sz types.TermSize) {
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
