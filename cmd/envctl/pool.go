package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

func (a *app) poolCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pool NAME SIZE",
		Short: "Keep SIZE started instances of a project's current version ready for up (0 = none)",
		Long: "Set a project's warm pool. The node keeps SIZE instances of the current version started and\n" +
			"invisible; `envctl up` of the current version that asks nothing but a TTL claims one (its\n" +
			"first command answers at once), and the pool refills in the background. Pooled instances\n" +
			"count against the tenant's instance quota; a new current version replaces them.",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return usageError{fmt.Errorf("SIZE %q: a number from 0 to 20", args[1])}
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.SetProjectPool(ctx, args[0], types.PoolSetting{Size: n})
			}, projectDetail)
		},
	}
}
