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

func (a *app) opCommand() *cobra.Command {
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an operation",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.GetOperation(ctx, args[0])
			}, operationDetail)
		},
	}
	watch := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow an operation's events until it is done",
		Long: `Follow an operation's events (on stderr) until it is done, then print it.
Exits 1 when the operation failed or was canceled. Interrupting the watch does
not cancel the operation.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p := a.newProgress()
			op, err := c.WaitOperation(cmd.Context(), args[0], p.event)
			p.done()
			if err != nil {
				return err
			}
			if err := a.emit(op, func(w io.Writer) { operationDetail(w, op) }); err != nil {
				return err
			}
			if op.State != types.OpSucceeded {
				return &exitCodeError{code: exitError, err: opFailure(string(op.Kind), op)}
			}
			return nil
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Ask an operation to stop",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Operation, error) {
				op, err := c.CancelOperation(ctx, args[0])
				if err != nil {
					return op, fmt.Errorf("cancel operation %s: %w", args[0], err)
				}
				return op, nil
			}, operationDetail)
		},
	}
	return group("op", "Inspect and follow operations", show, watch, cancel, a.opLogsCommand())
}

func (a *app) gcCommand() *cobra.Command {
	var (
		req    types.GCRequest
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "gc [--dry-run] [--no-wait]",
		Short: "Delete the versions retention policies do not keep, and their unused blobs (admin)",
		Long: `Run a garbage collection (admin token): for every project with a retention
policy ("envctl project retention"), delete the versions the policy does not
keep (never the current one, a pinned one or one an instance uses), their
manifests, then the registry's blobs no manifest references. --dry-run lists
what would go and deletes nothing.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOperation(a, cmd, "gc", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.GC(ctx, req)
			}, noWait, gcTable, nil)
		},
	}
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "list what would be deleted, delete nothing")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	return cmd
}

func gcTable(w io.Writer, res types.GCResult) {
	row(w, "TENANT", "PROJECT", "VERSION", "SIZE")
	for _, v := range res.Versions {
		row(w, v.Tenant, v.Project, v.Version, formatBytes(v.SizeBytes))
	}
	if res.Swept {
		row(w, fmt.Sprintf("registry: %d -> %d blobs, %s -> %s", res.BlobsBefore, res.BlobsAfter,
			formatBytes(res.BytesBefore), formatBytes(res.BytesAfter)))
	}
	if res.Note != "" {
		row(w, res.Note)
	}
}

// follow waits for op to end, showing its events as progress.
func (a *app) follow(ctx context.Context, c *client.Client, what string, op types.Operation) (types.Operation, error) {
	p := a.newProgress()
	done, err := c.WaitOperation(ctx, op.ID, p.event)
	p.done()
	if err != nil {
		return done, fmt.Errorf("wait for %s operation %s: %w", what, op.ID, err)
	}
	return done, nil
}

// runOperation is call for a command that starts an operation: with noWait
// it prints the operation start returned; otherwise it follows it, prints
// its result with rows, and exits 1 if it failed, 3 if conflict (may be
// nil) says its result lost a compare-and-swap.
func runOperation[T any](a *app, cmd *cobra.Command, what string, start func(ctx context.Context, c *client.Client) (types.Operation, error),
	noWait bool, rows func(io.Writer, T), conflict func(T) bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	op, err := start(cmd.Context(), c)
	if err != nil {
		return err
	}
	if noWait {
		return a.emit(op, func(w io.Writer) { operationDetail(w, op) })
	}
	if op, err = a.follow(cmd.Context(), c, what, op); err != nil {
		return err
	}
	if op.State != types.OpSucceeded {
		emitFailed(a, op, rows)
		return &exitCodeError{code: exitError, err: opFailure(what, op)}
	}
	var res T
	if err := json.Unmarshal(op.Result, &res); err != nil {
		return fmt.Errorf("%s operation %s: decode result: %w", what, op.ID, err)
	}
	if err := a.emit(res, func(w io.Writer) { rows(w, res) }); err != nil {
		return err
	}
	if conflict != nil && conflict(res) {
		return &exitCodeError{code: exitConflict}
	}
	return nil
}
