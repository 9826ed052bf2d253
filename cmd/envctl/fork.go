package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

func (a *app) forkCommand() *cobra.Command {
	var (
		req    types.ForkRequest
		noWait bool
		key    string
	)
	cmd := &cobra.Command{
		Use:   "fork INSTANCE [-m MSG] [--ttl D] [--retain]",
		Short: "Save an instance as a version that is not current and start a second instance from it",
		Long: `Fork an instance: its state now is saved as a new version that does not
become current, and a second instance starts from that version. The first
instance is left as it was: it keeps running and its own saves go on as
before. For agents that explore two paths from one point.

Events are shown on stderr while waiting; with --no-wait the operation is
printed as soon as it starts.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "fork", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.Fork(ctx, args[0], req, key)
			}, noWait, func(w io.Writer, res types.ForkResult) {
				row(w, "VERSION:", res.Version)
				instanceDetail(w, res.Instance)
			}, nil)
		},
	}
	cmd.Flags().StringVarP(&req.Message, "message", "m", "", "message of the version the fork saves")
	cmd.Flags().StringVar(&req.TTL, "ttl", "", "lifetime of the second instance (a duration or none; default: the server's)")
	cmd.Flags().BoolVar(&req.Retain, "retain", false, "keep the second instance's layer when it stops")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}
