package main

import (
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"
)

func (a *app) volumeCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls PROJECT",
		Short: "List a project's volumes with their usage on this node",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			vs, err := c.ListVolumes(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(vs, func(w io.Writer) { volumeTable(w, vs...) })
		},
	}
	var pathAdd []string
	add := &cobra.Command{
		Use:   "add PROJECT NAME:PATH[:UID:GID][:SIZE]",
		Short: "Add a volume to a project (mounted by instances started from now on)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.AddVolume(cmd.Context(), args[0], types.AddVolumeRequest{Spec: args[1], PathAdd: pathAdd})
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) { projectDetail(w, p) })
		},
	}
	add.Flags().StringArrayVar(&pathAdd, "path-add", nil, "directory inside the volume to put on instances' PATH (repeatable)")
	rm := &cobra.Command{
		Use:   "rm PROJECT NAME",
		Short: "Remove a volume and delete its data (refused while instances are live)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.RemoveVolume(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) { projectDetail(w, p) })
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
			c, err := a.client()
			if err != nil {
				return err
			}
			arc, err := c.ArchiveVolume(cmd.Context(), args[0], args[1], arcReq)
			if err != nil {
				return err
			}
			return a.emit(arc, func(w io.Writer) {
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
		Use:   "restore PROJECT NAME (--name ARCHIVE | --key KEY)",
		Short: "Replace a volume's content on this node with one of the project's archives",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (restoreReq.Name == "") == (restoreReq.Key == "") {
				return usageError{fmt.Errorf("volume restore: give --name or --key, one of them")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.RestoreVolume(cmd.Context(), args[0], args[1], restoreReq)
			if err != nil {
				return err
			}
			return a.emit(v, func(w io.Writer) { volumeTable(w, v) })
		},
	}
	restore.Flags().StringVar(&restoreReq.Name, "name", "", "name of an archive of this volume")
	restore.Flags().StringVar(&restoreReq.Key, "key", "", "key of an archive of this project (as archive or archives shows it)")
	var arcVolume string
	archives := &cobra.Command{
		Use:   "archives PROJECT [--volume NAME]",
		Short: "List a project's volume archives",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			as, err := c.ListArchives(cmd.Context(), args[0], arcVolume)
			if err != nil {
				return err
			}
			return a.emit(as, func(w io.Writer) { archiveTable(w, as...) })
		},
	}
	archives.Flags().StringVar(&arcVolume, "volume", "", "only this volume's archives")
	archiveRm := &cobra.Command{
		Use:   "archive-rm PROJECT NAME ARCHIVE",
		Short: "Delete an archive of a volume (its record and its object)",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			arc, err := c.DeleteArchive(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return a.emit(arc, func(w io.Writer) { archiveTable(w, arc) })
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
