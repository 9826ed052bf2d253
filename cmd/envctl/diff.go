package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

func (a *app) diffCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "diff PROJECT N [M]",
		Short: "Show what changed in version N: packages, then files (against M, or N's parent)",
		Long: `Show what changed from version M (default: N's parent) to version N:
packages added, removed and upgraded (from the dpkg or apk database), then
files added (A), modified (M) and deleted (D), with package lists, caches,
logs and documentation summarised by directory, and the directories that
grew the most.`,
		Args: rangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			against := 0
			if len(args) == 3 {
				if against, err = versionArg(args[2]); err != nil {
					return err
				}
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Changes, error) {
				return c.VersionChanges(ctx, args[0], n, against, limit)
			}, changesTable)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many added, modified and deleted entries each (default: the server's, 1000)")
	return cmd
}

func (a *app) changesCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "changes INSTANCE",
		Short: "Show what a save of the instance would capture now, and what it leaves out",
		Long: `Show what a save of the instance would capture now, against the version its
layer sits on: packages, then files, as envctl diff shows them, and the paths
a save leaves out (runtime mount points, files the node writes, volumes, the
project's excludes) with the reason. The instance is not frozen: a running one
may change meanwhile.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Changes, error) {
				return c.InstanceChanges(ctx, args[0], limit)
			}, changesTable)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many added, modified and deleted entries each (default: the server's, 1000)")
	return cmd
}

// changesTable prints changes for a person: packages first, then files. w
// is a tabwriter: each block of tab-separated lines is aligned.
func changesTable(w io.Writer, ch types.Changes) {
	if ch.Instance != "" {
		fmt.Fprintf(w, "A save of %s (%s) now, against version %d\n", ch.Instance, ch.Project, ch.Against)
	} else {
		fmt.Fprintf(w, "Version %d of %s against %d\n", ch.Version, ch.Project, ch.Against)
	}
	if p := ch.Packages; p != nil {
		fmt.Fprintf(w, "\nPackages (%s): %d added, %d removed, %d upgraded\n", p.Manager, len(p.Added), len(p.Removed), len(p.Upgraded))
		for _, pk := range p.Added {
			fmt.Fprintf(w, "  + %s %s\n", pk.Name, pk.Version)
		}
		for _, u := range p.Upgraded {
			fmt.Fprintf(w, "  ~ %s %s -> %s\n", u.Name, u.From, u.To)
		}
		for _, pk := range p.Removed {
			fmt.Fprintf(w, "  - %s %s\n", pk.Name, pk.Version)
		}
	}
	t := ch.Totals
	fmt.Fprintf(w, "\nFiles: %d added, %d modified, %d deleted (%s written)\n", t.Added, t.Modified, t.Deleted, formatBytes(t.AddedBytes))
	for _, group := range []struct {
		mark string
		list []types.FileChange
	}{{"A", ch.Added}, {"M", ch.Modified}, {"D", ch.Deleted}} {
		for _, fc := range group.list {
			detail := fc.Mode
			if fc.Link != "" {
				detail = "-> " + fc.Link
			}
			if fc.Was != nil {
				var was []string
				if fc.Was.Type != fc.Type {
					was = append(was, fc.Was.Type)
				}
				if fc.Was.Mode != fc.Mode {
					was = append(was, fc.Was.Mode)
				}
				if fc.Was.Size != fc.Size {
					was = append(was, formatBytes(fc.Was.Size))
				}
				if len(was) > 0 {
					detail += " (was " + strings.Join(was, ", ") + ")"
				}
			}
			size := ""
			if fc.Type == "file" {
				size = formatBytes(fc.Size)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", group.mark, fc.Path, fc.Type, size, detail)
		}
	}
	if ch.Truncated {
		fmt.Fprintln(w, "  (lists cut at the limit; --limit N shows more)")
	}
	if len(ch.Summarized) > 0 {
		fmt.Fprintln(w, "\nSummarised:")
		for _, s := range ch.Summarized {
			fmt.Fprintf(w, "  %s\t%d added, %d modified, %d deleted\t%s\t%s\n", s.Path, s.Added, s.Modified, s.Deleted, formatBytes(s.Bytes), s.Reason)
		}
	}
	if len(ch.TopDirs) > 0 {
		fmt.Fprintln(w, "\nLargest directories:")
		for _, d := range ch.TopDirs {
			fmt.Fprintf(w, "  %s\t%s\t%d files\n", d.Path, formatBytes(d.Bytes), d.Files)
		}
	}
	if len(ch.Excluded) > 0 {
		fmt.Fprintln(w, "\nNot saved:")
		for _, e := range ch.Excluded {
			fmt.Fprintf(w, "  %s\t%s\n", e.Path, e.Reason)
		}
	}
}
