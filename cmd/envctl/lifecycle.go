package main

import (
	"context"
	"io"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// lifecycleCommand is one instance verb: stop, start, pause or resume.
func (a *app) lifecycleCommand(use, short string, verb func(*client.Client, context.Context, string) (types.Instance, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use + " INSTANCE",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			inst, err := verb(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(inst, func(w io.Writer) { instanceTable(w, inst) })
		},
	}
}

func (a *app) lifecycleCommands() []*cobra.Command {
	return []*cobra.Command{
		a.lifecycleCommand("stop", "Stop an instance: kill its processes, keep its writable layer", (*client.Client).StopInstance),
		a.lifecycleCommand("start", "Start a stopped instance on its kept writable layer", (*client.Client).StartInstance),
		a.lifecycleCommand("pause", "Freeze an instance's processes (memory is kept)", (*client.Client).PauseInstance),
		a.lifecycleCommand("resume", "Thaw a paused instance", (*client.Client).ResumeInstance),
		a.renewCommand(),
	}
}

func (a *app) renewCommand() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "renew INSTANCE --ttl D",
		Short: "Set an instance's expiry to now + D (may shorten it), or none",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			inst, err := c.RenewInstance(cmd.Context(), args[0], ttl)
			if err != nil {
				return err
			}
			return a.emit(inst, func(w io.Writer) { instanceTable(w, inst) })
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", `time to live from now, a Go duration such as 2h, or "none" (required)`)
	_ = cmd.MarkFlagRequired("ttl")
	return cmd
}
