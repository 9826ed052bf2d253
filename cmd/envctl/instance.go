package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) upCommand() *cobra.Command {
	var (
		req    types.CreateInstanceRequest
		key    string
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "up PROJECT [--version N | --checkpoint ID] [--ttl D] [--retain] [--no-wait] [--idempotency-key K]",
		Short: "Start an instance of a project",
		Long: `Start an instance of a project from a version (default: current) and wait
until it runs.

With --no-wait the start is a restore operation: it is printed at once (its
target is the new instance) and runs on; follow it with "envctl op watch ID".`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if noWait {
				return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Operation, error) {
					return c.Restore(ctx, args[0], req, client.WithIdempotencyKey(key))
				}, operationDetail)
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return c.CreateInstance(ctx, args[0], req, client.WithIdempotencyKey(key))
			}, one(instanceTable))
		},
	}
	cmd.Flags().IntVar(&req.Version, "version", 0, "version to start from (default: the project's current)")
	cmd.Flags().IntVar(&req.Checkpoint, "checkpoint", 0, "start from checkpoint ID: its version, with the volumes restored from its archives first")
	cmd.Flags().StringVar(&req.TTL, "ttl", "", `time to live, a Go duration such as 8h, or "none" (default: the server's)`)
	cmd.Flags().BoolVar(&req.Retain, "retain", false, "keep the writable layer when the instance stops")
	cmd.Flags().StringToStringVar(&req.NodeSelector, "node-selector", nil, "only nodes with these labels take it, KEY=VALUE,...")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "start it as a restore operation, print the operation and do not wait")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key and flags returns the same instance (or operation)")
	return cmd
}

// maxStdin is the most stdin a non-interactive exec forwards: the request
// must stay under the server's 1 MiB JSON limit.
const maxStdin = 960 << 10

func (a *app) execCommand() *cobra.Command {
	var (
		req                  types.ExecRequest
		noStdin              bool
		interactive, withTTY bool
	)
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] [--wake] INSTANCE [--env K=V]... [--cwd DIR] -- CMD [ARGS...]",
		Short: "Run a command in an instance; envctl exits with its exit code",
		Long: `Run a command in an instance and wait for it.

Without -i and -t, the command runs to its end and then its stdout and stderr
are written as returned (each cut at 4 MiB) and envctl exits with the
command's exit code. Stdin is forwarded (up to 960 KiB) when it is not a
terminal, unless --no-stdin. With -o json or yaml the result object is printed
instead.

With -i or -t the command's streams are connected live over a WebSocket,
without size limits: -i forwards stdin as it comes (closing it at EOF), -t
gives the command a terminal. With -it on a terminal, the local terminal is
put in raw mode (Ctrl-C, Ctrl-D and Ctrl-Z go to the remote command), its
size follows the local one, and it is restored on exit. envctl exits with the
command's exit code.

With --wake a stopped or hibernated instance (one idle stop stopped, say) is
started first, on this node for a hibernated one, and the command runs once it
is Running; past the server's wake wait the answer is 503 waking: retry.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{fmt.Errorf("exec: want INSTANCE -- CMD [ARGS...] (usage: %s)", cmd.UseLine())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			req.Args = args[1:]
			if interactive || withTTY {
				return a.execStream(cmd.Context(), c, args[0], req, interactive && !noStdin, withTTY)
			}
			if !noStdin && a.stdin != nil && !isTerminal(a.stdin) {
				b, err := io.ReadAll(io.LimitReader(a.stdin, maxStdin+1))
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				if len(b) > maxStdin {
					return fmt.Errorf("stdin is larger than %d bytes, too much for a non-interactive exec", maxStdin)
				}
				req.Stdin = string(b)
			}
			res, err := c.Exec(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if a.structured() {
				if err := a.emit(res, nil); err != nil {
					return err
				}
			} else {
				_, _ = io.WriteString(a.stdout, res.Stdout)
				_, _ = io.WriteString(a.stderr, res.Stderr)
				if res.Truncated {
					fmt.Fprintf(a.stderr, "envctl: output cut at %d bytes\n", types.MaxExecOutput)
				}
			}
			if res.ExitCode != 0 {
				code := res.ExitCode
				if code < 0 || code > 255 {
					code = exitError
				}
				return &exitCodeError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&req.Env, "env", nil, "environment variable K=V (repeatable)")
	cmd.Flags().StringVar(&req.Cwd, "cwd", "", "working directory")
	cmd.Flags().StringVar(&req.Timeout, "timeout", "", "time limit, a Go duration (default: the server's, 10m)")
	cmd.Flags().BoolVar(&noStdin, "no-stdin", false, "do not forward stdin")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "stream stdin to the command as it comes")
	cmd.Flags().BoolVarP(&withTTY, "tty", "t", false, "give the command a terminal")
	cmd.Flags().BoolVar(&req.Wake, "wake", false, "start a stopped or hibernated (idle) instance first and wait for it")
	return cmd
}

func (a *app) lsCommand() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "ls [PROJECT | INSTANCE:PATH]",
		Short: "List instances, of one project or all; or the files of an instance's directory",
		Args:  rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && isFileArg(args[0]) {
				return a.lsFiles(cmd, args[0], user) // files.go
			}
			project := ""
			if len(args) == 1 {
				project = args[0]
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Instance, error) {
				return c.ListInstances(ctx, project)
			}, all(instanceTable))
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "with INSTANCE:PATH: list as this user of the instance (default the image's user)")
	return cmd
}

func (a *app) showCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show INSTANCE",
		Short: "Show an instance",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return c.GetInstance(ctx, args[0])
			}, instanceDetail)
		},
	}
}

func (a *app) rmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm INSTANCE",
		Short: "Delete an instance",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return c.DeleteInstance(ctx, args[0])
			}, one(instanceTable))
		},
	}
}

// saveOutput is what save -o json prints.
type saveOutput struct {
	ID        string          `json:"id"`
	State     string          `json:"state"`
	Project   string          `json:"project,omitempty"`
	Version   int             `json:"version"`
	Current   bool            `json:"current"`
	Conflict  bool            `json:"conflict"`
	Operation types.Operation `json:"operation"`
}

func (a *app) saveCommand() *cobra.Command {
	var (
		req      types.SaveRequest
		expected int
		noWait   bool
		key      string
	)
	cmd := &cobra.Command{
		Use:   "save INSTANCE [-m MSG] [--expected N] [--no-wait] [--idempotency-key K]",
		Short: "Save an instance as a new version of its project",
		Long: `Save an instance's changes as a new version of its project and wait for it.

The new version becomes current only if current is still the version the
instance expects (the one it started from or last saved, or --expected N).
Otherwise the version is kept but not current: a conflict.

Events are shown on stderr while waiting. With --no-wait the operation is
printed as soon as it starts; follow it with "envctl op watch ID".

Exit codes: 0 saved and current; 1 the save failed or was canceled;
3 saved but NOT current (conflict).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("expected") {
				req.ExpectedCurrent = &expected
			}
			ctx := cmd.Context()
			op, err := c.Save(ctx, args[0], req, key)
			if err != nil {
				return err
			}
			if noWait {
				return a.emit(op, func(w io.Writer) { operationDetail(w, op) })
			}
			if op, err = a.follow(ctx, c, "save", op); err != nil {
				return err
			}
			var res types.SaveResult
			if op.State == types.OpSucceeded {
				if err := json.Unmarshal(op.Result, &res); err != nil {
					return fmt.Errorf("save operation %s: decode result: %w", op.ID, err)
				}
			}
			out := saveOutput{ID: op.ID, State: string(op.State), Project: res.Project, Version: res.Version,
				Current: res.Current, Conflict: res.Conflict, Operation: op}
			if err := a.emit(out, func(w io.Writer) { a.saveTable(cmd, w, op, res) }); err != nil {
				return err
			}
			switch {
			case op.State != types.OpSucceeded:
				return &exitCodeError{code: exitError, err: opFailure("save", op)}
			case res.Conflict:
				return &exitCodeError{code: exitConflict}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&req.Message, "message", "m", "", "message of the new version")
	cmd.Flags().IntVar(&expected, "expected", 0, "version expected to be current (default: the instance's own expectation)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}

func (a *app) saveTable(cmd *cobra.Command, w io.Writer, op types.Operation, res types.SaveResult) {
	if op.State != types.OpSucceeded {
		row(w, fmt.Sprintf("save %s %s", op.ID, op.State))
		return
	}
	status := "current"
	if !res.Current {
		now := "unknown"
		if c, err := a.client(); err == nil {
			if p, err := c.GetProject(cmd.Context(), res.Project); err == nil {
				now = fmt.Sprint(p.Current)
			}
		}
		status = fmt.Sprintf("NOT current: conflict, current is %s", now)
	}
	fmt.Fprintf(w, "saved version %d of %s (%s)\n", res.Version, res.Project, status)
	fmt.Fprintf(w, "freeze %s, spool %s, encode %s, push %s, commit %s, total %s; layer %s, %d entries, %s\n",
		formatMS(res.FreezeMS), formatMS(res.SpoolMS), formatMS(res.EncodeMS), formatMS(res.PushMS),
		formatMS(res.CommitMS), formatMS(res.TotalMS), formatBytes(res.LayerBytes), res.Entries, orDash(res.Compression))
}

// opFailure describes an operation that did not succeed.
func opFailure(what string, op types.Operation) error {
	return &opFailedError{what: what, op: op}
}

// opFailedError is an operation that ended failed or canceled; -o json
// prints its code and id.
type opFailedError struct {
	what string
	op   types.Operation
}

func (e *opFailedError) Error() string {
	if e.op.Error != nil {
		return fmt.Sprintf("%s %s %s: %s (%s)", e.what, e.op.ID, e.op.State, e.op.Error.Message, e.op.Error.Code)
	}
	return e.what + " " + e.op.ID + " " + string(e.op.State)
}
