package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// outputIsFile marks a command whose -o names a file to write, not an
// output format.
const outputIsFile = "envctl.output-is-file"

// exportTo writes what export writes to the file out (-f, else the global
// -o names it here; - is stdout). A file is written next to out and renamed
// at the end: a failed export leaves no partial file under the name.
func (a *app) exportTo(cmd *cobra.Command, out string, export func(c *client.Client, w io.Writer) (int64, error)) error {
	if out == "" && a.output != outTable {
		out = a.output // -o FILE: the global output flag names the file here
	}
	if out == "" {
		return usageError{fmt.Errorf("-o FILE is required (- for stdout)")}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	w := io.Writer(a.stdout)
	var f *os.File
	if out != "-" {
		if f, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*"); err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		w = f
	}
	written, err := export(c, w)
	if err != nil {
		return err
	}
	if f == nil {
		return nil
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "wrote %s (%s)\n", out, formatBytes(written))
	return nil
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
	var out string
	export := &cobra.Command{
		Use:         "export PROJECT N -o FILE",
		Annotations: map[string]string{outputIsFile: "yes"},
		Example: `  envctl version export web 3 -o web-3.oci.tar
  envctl version export web 3 -o - | ssh other envctl image import /dev/stdin web`,
		Short: "Write version N as an OCI image layout tar, for envctl image import on another installation",
		Long: `Write version N of PROJECT as a tar of an OCI image layout (oci-layout,
index.json, blobs/): its manifest, config and layers as stored, so eStargz
layers stay eStargz and the image restores lazily wherever it is imported
("envctl image import FILE NAME"). Here -o (or -f) names the file to write;
-o - writes to stdout.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			return a.exportTo(cmd, out, func(c *client.Client, w io.Writer) (int64, error) {
				return c.ExportVersion(cmd.Context(), args[0], n, w)
			})
		},
	}
	export.Flags().StringVarP(&out, "file", "f", "", "the tar to write; - for stdout")
	cmd := group("version", "Print envctl's and the server's version; show a project's version N; export one", show, export)
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
