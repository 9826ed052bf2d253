package main

import (
	"context"

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
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return verb(c, ctx, args[0])
			}, one(instanceTable))
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
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return c.RenewInstance(ctx, args[0], ttl)
			}, one(instanceTable))
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", `time to live from now, a Go duration such as 2h, or "none" (required)`)
	_ = cmd.MarkFlagRequired("ttl")
	return cmd
}
