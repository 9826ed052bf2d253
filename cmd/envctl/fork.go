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
		Use:   "fork INSTANCE [-m MSG] [--ttl D] [--retain] [--memory] [-n N]",
		Short: "Save an instance as a version that is not current and start new instances from it",
		Long: `Fork an instance: its state now is saved as a new version that does not
become current, and new instances (one, or -n N up to 16) start from that
version. The first instance is left as it was: it keeps running and its own
saves go on as before. For agents that explore several paths from one point.

With --memory (instances of the gvisor runtime class) the running processes
are forked too: one checkpoint with memory is taken (one freeze; the instance
runs on) and every new instance continues its processes from it, each with
its own id, address and generation; what each changes afterwards is its own.
Refused with memory_checkpoint_unsupported before anything is made on other
classes, a stopped instance, or one with an established outside TCP
connection. The tenant's instance quota must hold all N, or none starts.

Events are shown on stderr while waiting; with --no-wait the operation is
printed as soon as it starts.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "fork", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.Fork(ctx, args[0], req, key)
			}, noWait, func(w io.Writer, res types.ForkResult) {
				row(w, "VERSION:", res.Version)
				if res.Checkpoint != 0 {
					row(w, "CHECKPOINT:", res.Checkpoint)
				}
				if len(res.Instances) > 1 {
					row(w)
					row(w, "ID", "STATE", "ADDRESS", "GENERATION", "EXPIRES")
					for _, i := range res.Instances {
						row(w, i.ID, i.State, orDash(i.Address), i.Generation, formatTimePtr(i.ExpiresAt))
					}
					return
				}
				instanceDetail(w, res.Instance)
			}, nil)
		},
	}
	cmd.Flags().StringVarP(&req.Message, "message", "m", "", "message of the version the fork saves")
	cmd.Flags().StringVar(&req.TTL, "ttl", "", "lifetime of the new instances (a duration or none; default: the server's)")
	cmd.Flags().BoolVar(&req.Retain, "retain", false, "keep the new instances' layers when they stop")
	cmd.Flags().BoolVar(&req.Memory, "memory", false, "fork the running processes too (gvisor runtime class)")
	cmd.Flags().IntVarP(&req.Count, "count", "n", 0, "how many new instances to start (1 to 16; default 1)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}
