package main

import (
	"context"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// lifecycleCommand is one plain instance verb of types.InstanceVerbs:
// "envctl NAME INSTANCE".
func (a *app) lifecycleCommand(v types.InstanceVerb) *cobra.Command {
	return &cobra.Command{
		Use:   v.Name + " INSTANCE",
		Short: v.Summary,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				return c.InstanceVerb(ctx, args[0], v.Name)
			}, one(instanceTable))
		},
	}
}

// lifecycleCommands are a command per plain verb, from the list (a verb
// added there is a command without a line here), and renew, which has a
// flag.
func (a *app) lifecycleCommands() []*cobra.Command {
	cmds := make([]*cobra.Command, 0, len(types.InstanceVerbs)+1)
	for _, v := range types.InstanceVerbs {
		cmds = append(cmds, a.lifecycleCommand(v))
	}
	return append(cmds, a.renewCommand())
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

func (a *app) hibernateCommand() *cobra.Command {
	var req types.HibernateRequest
	cmd := &cobra.Command{
		Use:   "hibernate INSTANCE [--memory]",
		Short: "Save a stopped retained instance as a version and free its layer on the node; --memory: a running one with its processes",
		Long: `Hibernate an instance: its compute is freed and any access (exec, files, ports,
SSH, console, start) wakes it, on any node.

Without --memory the instance must be stopped and retained: its writable layer
is saved as a version (not current) and freed on the node; a wake starts its
processes anew.

With --memory a running instance is hibernated with its processes: its rootfs
and the memory image of its processes are taken at one freeze and kept as a
checkpoint (listed by envctl checkpoints), the instance is stopped and its
container removed, and a wake resumes the processes where they were (same
instance id, a new generation and address). Memory is kept only for runtime
class gvisor and without established TCP connections to peers outside the
instance; otherwise the request is refused (memory_checkpoint_unsupported,
with the reason) and nothing changes.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Instance, error) {
				if req.Memory {
					return c.HibernateInstanceWith(ctx, args[0], req)
				}
				return c.HibernateInstance(ctx, args[0])
			}, one(instanceTable))
		},
	}
	cmd.Flags().BoolVar(&req.Memory, "memory", false, "hibernate a running instance with its processes (gvisor class); any access resumes them")
	return cmd
}
