package main

import (
	"context"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) volumeCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls PROJECT",
		Short: "List a project's volumes with their usage on this node",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Volume, error) {
				return c.ListVolumes(ctx, args[0])
			}, all(volumeTable))
		},
	}
	var pathAdd []string
	add := &cobra.Command{
		Use:   "add PROJECT NAME:PATH[:UID:GID][:SIZE]",
		Short: "Add a volume to a project (mounted by instances started from now on)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.AddVolume(ctx, args[0], types.AddVolumeRequest{Spec: args[1], PathAdd: pathAdd})
			}, projectDetail)
		},
	}
	add.Flags().StringArrayVar(&pathAdd, "path-add", nil, "directory inside the volume to put on instances' PATH (repeatable)")
	rm := &cobra.Command{
		Use:   "rm PROJECT NAME",
		Short: "Remove a volume and delete its data (refused while instances are live)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.RemoveVolume(ctx, args[0], args[1])
			}, projectDetail)
		},
	}
	var arcReq types.VolumeArchiveRequest
	archive := &cobra.Command{
		Use:   "archive PROJECT NAME [--name ARCHIVE] [--replace]",
		Short: "Copy a volume's content to object storage, as a named archive of the project",
		Long: `Copy a volume's content to object storage. The server chooses the object key
(under the tenant's and project's prefix) and records the archive; --name names
it within the volume (default: a UTC time stamp). An archive of that name
already there is refused (already_exists) unless --replace is given.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.VolumeArchive, error) {
				return c.ArchiveVolume(ctx, args[0], args[1], arcReq)
			}, func(w io.Writer, arc types.VolumeArchive) {
				row(w, "NAME:", arc.Name)
				row(w, "KEY:", arc.Key)
				row(w, "BYTES:", formatBytes(arc.Bytes))
				row(w, "FILES:", arc.Files)
				if arc.Replaced {
					row(w, "REPLACED:", "yes")
				}
			})
		},
	}
	archive.Flags().StringVar(&arcReq.Name, "name", "", "archive name within the volume (default: a UTC time stamp)")
	archive.Flags().BoolVar(&arcReq.Replace, "replace", false, "replace an archive of the same name")
	var restoreReq types.VolumeArchiveRequest
	restore := &cobra.Command{
		Use:   "restore PROJECT NAME (--name ARCHIVE | --key KEY | --checkpoint ID)",
		Short: "Replace a volume's content on this node with one of the project's archives",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := len(restoreReq.Name) + len(restoreReq.Key); (n == 0) == (restoreReq.Checkpoint == 0) || (restoreReq.Name != "" && restoreReq.Key != "") {
				return usageError{fmt.Errorf("volume restore: give --name, --key or --checkpoint, one of them")}
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Volume, error) {
				return c.RestoreVolume(ctx, args[0], args[1], restoreReq)
			}, one(volumeTable))
		},
	}
	restore.Flags().StringVar(&restoreReq.Name, "name", "", "name of an archive of this volume")
	restore.Flags().StringVar(&restoreReq.Key, "key", "", "key of an archive of this project (as archive or archives shows it)")
	restore.Flags().IntVar(&restoreReq.Checkpoint, "checkpoint", 0, "the volume's archive of checkpoint ID")
	var arcVolume string
	archives := &cobra.Command{
		Use:   "archives PROJECT [--volume NAME]",
		Short: "List a project's volume archives",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.VolumeArchive, error) {
				return c.ListArchives(ctx, args[0], arcVolume)
			}, all(archiveTable))
		},
	}
	archives.Flags().StringVar(&arcVolume, "volume", "", "only this volume's archives")
	archiveRm := &cobra.Command{
		Use:   "archive-rm PROJECT NAME ARCHIVE",
		Short: "Delete an archive of a volume (its record and its object)",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.VolumeArchive, error) {
				return c.DeleteArchive(ctx, args[0], args[1], args[2])
			}, one(archiveTable))
		},
	}
	return group("volume", "Persistent volumes of a project", ls, add, rm, archive, restore, archives, archiveRm)
}

func archiveTable(w io.Writer, as ...types.VolumeArchive) {
	row(w, "VOLUME", "NAME", "BYTES", "FILES", "NODE", "CREATED", "KEY")
	for _, a := range as {
		row(w, a.Volume, a.Name, formatBytes(a.Bytes), a.Files, orDash(a.Node), formatTime(a.CreatedAt), a.Key)
	}
}
