package main

import (
	"context"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) versionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "versions PROJECT",
		Short: "List a project's versions",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Version, error) {
				return c.ListVersions(ctx, args[0])
			}, all(versionTable))
		},
	}
}

func (a *app) versionCommand() *cobra.Command {
	show := &cobra.Command{
		Use:   "show PROJECT N",
		Short: "Show one version of a project",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Version, error) {
				return c.GetVersion(ctx, args[0], n)
			}, versionDetail)
		},
	}
	cmd := group("version", "Print envctl's and the server's version; show a project's version N", show)
	cmd.Long = `Without a subcommand, print envctl's version and the server's (when it
answers), like envctl --version. "envctl version show PROJECT N" shows
version N of a project.`
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return a.printVersion(cmd) }
	return cmd
}

func (a *app) switchCommand() *cobra.Command {
	var expected int
	cmd := &cobra.Command{
		Use:   "switch PROJECT N [--expected M]",
		Short: "Make version N the project's current version",
		Long: `Make version N current: new instances start from it.

The switch is a compare-and-swap: it happens only if M (--expected M, or the
current version envctl reads first) is still current; otherwise it fails with
a conflict and nothing changes.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				req := types.SetCurrentRequest{Version: n, ExpectedCurrent: &expected}
				if !cmd.Flags().Changed("expected") {
					p, err := c.GetProject(ctx, args[0])
					if err != nil {
						return p, err
					}
					expected = p.Current
				}
				return c.SetCurrent(ctx, args[0], req)
			}, one(projectTable))
		},
	}
	cmd.Flags().IntVar(&expected, "expected", 0, "switch only if this version is current (default: the current version read first)")
	return cmd
}

func (a *app) pinCommand(pin bool) *cobra.Command {
	use, short := "pin", "Keep a version from retention"
	if !pin {
		use, short = "unpin", "Let retention remove a version again"
	}
	return &cobra.Command{
		Use:   use + " PROJECT N",
		Short: short,
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Version, error) {
				if pin {
					return c.PinVersion(ctx, args[0], n)
				}
				return c.UnpinVersion(ctx, args[0], n)
			}, one(versionTable))
		},
	}
}
