package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/envd"
)

func (a *app) opCommand() *cobra.Command {
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an operation",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			op, err := c.GetOperation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(op, func(w io.Writer) { operationDetail(w, op) })
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
			if op.State != envd.OpSucceeded {
				return &exitCodeError{code: exitError, err: opFailure(op.Kind, op)}
			}
			return nil
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Ask an operation to stop",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			op, err := c.CancelOperation(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("cancel operation %s: %w", args[0], err)
			}
			return a.emit(op, func(w io.Writer) { operationDetail(w, op) })
		},
	}
	return group("op", "Inspect and follow operations", show, watch, cancel)
}
