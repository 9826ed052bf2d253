package main

import (
	"context"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) networkCommand() *cobra.Command {
	var n types.ProjectNetwork
	cmd := &cobra.Command{
		Use:   "network NAME --egress open|none|allow:CIDR|HOST,... [--isolate-instances]",
		Short: "Set where a project's instances may connect",
		Long: `Set a project's network policy. --egress is open (the internet; private
ranges such as 10.0.0.0/8 are dropped), none (nothing beyond the project's own
instances, and no DNS server), or allow:ENTRY,... with IPv4 CIDRs, addresses
and host names (resolved when an instance starts), plus DNS. With
--isolate-instances the project's instances cannot connect to each other
either; other projects' instances never can, nor can any instance reach the
node, link-local addresses or the cluster's services. The policy applies at
once to running instances on the node that answers, to the others when they
next start; open connections are not cut.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.SetProjectNetwork(ctx, args[0], n)
			}, projectDetail)
		},
	}
	cmd.Flags().StringVar(&n.Egress, "egress", "open", "open, none, or allow:CIDR|HOST,...")
	cmd.Flags().BoolVar(&n.IsolateInstances, "isolate-instances", false, "the project's instances cannot connect to each other")
	return cmd
}
