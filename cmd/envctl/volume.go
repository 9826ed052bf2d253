package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/envd"
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
			p, err := c.AddVolume(cmd.Context(), args[0], envd.AddVolumeRequest{Spec: args[1], PathAdd: pathAdd})
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
	var key string
	archive := &cobra.Command{
		Use:   "archive PROJECT NAME [--key KEY]",
		Short: "Copy a volume's content to object storage",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			arc, err := c.ArchiveVolume(cmd.Context(), args[0], args[1], envd.VolumeArchiveRequest{Key: key})
			if err != nil {
				return err
			}
			return a.emit(arc, func(w io.Writer) {
				row(w, "KEY:", arc.Key)
				row(w, "BYTES:", formatBytes(arc.Bytes))
				row(w, "FILES:", arc.Files)
			})
		},
	}
	archive.Flags().StringVar(&key, "key", "", "object key (default: generated)")
	var restoreKey string
	restore := &cobra.Command{
		Use:   "restore PROJECT NAME --key KEY",
		Short: "Replace a volume's content on this node with an archive",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.RestoreVolume(cmd.Context(), args[0], args[1], envd.VolumeArchiveRequest{Key: restoreKey})
			if err != nil {
				return err
			}
			return a.emit(v, func(w io.Writer) { volumeTable(w, v) })
		},
	}
	restore.Flags().StringVar(&restoreKey, "key", "", "object key of the archive (required)")
	_ = restore.MarkFlagRequired("key")
	return group("volume", "Persistent volumes of a project", ls, add, rm, archive, restore)
}
