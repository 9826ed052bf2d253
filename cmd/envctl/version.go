package main

import (
	"io"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"
)

func (a *app) versionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "versions PROJECT",
		Short: "List a project's versions",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			vs, err := c.ListVersions(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(vs, func(w io.Writer) { versionTable(w, vs...) })
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
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.GetVersion(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			return a.emit(v, func(w io.Writer) { versionDetail(w, v) })
		},
	}
	return group("version", "Inspect versions", show)
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
			c, err := a.client()
			if err != nil {
				return err
			}
			req := types.SetCurrentRequest{Version: n, ExpectedCurrent: &expected}
			if !cmd.Flags().Changed("expected") {
				p, err := c.GetProject(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				expected = p.Current
			}
			p, err := c.SetCurrent(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) { projectTable(w, p) })
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
			c, err := a.client()
			if err != nil {
				return err
			}
			var v types.Version
			if pin {
				v, err = c.PinVersion(cmd.Context(), args[0], n)
			} else {
				v, err = c.UnpinVersion(cmd.Context(), args[0], n)
			}
			if err != nil {
				return err
			}
			return a.emit(v, func(w io.Writer) { versionTable(w, v) })
		},
	}
}
