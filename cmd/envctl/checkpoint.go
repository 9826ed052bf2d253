package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// checkpointCommands are "checkpoint INSTANCE" (with show and rm below it)
// and "checkpoints PROJECT".
func (a *app) checkpointCommands() []*cobra.Command {
	var (
		req    types.CheckpointRequest
		noWait bool
		key    string
	)
	take := &cobra.Command{
		Use:   "checkpoint INSTANCE [-m MSG] [--set-current] | checkpoint show|rm PROJECT ID",
		Short: "Freeze an instance once and keep its rootfs and its volumes from that moment, together",
		Long: `Take a coordinated checkpoint of an instance: its processes are frozen once,
and at that moment its root filesystem is saved as a version and every volume
of its project is copied; the volumes are archived to object storage. The
version and the archives are one checkpoint: "envctl up PROJECT --checkpoint
ID" starts from both, "envctl volume restore PROJECT VOLUME --checkpoint ID"
brings one volume back, and retention, gc and "checkpoint rm" keep or delete
them together.

The version does not become current unless --set-current (then by
compare-and-swap, as a save: exit code 3 when current had moved).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "checkpoint", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.Checkpoint(ctx, args[0], req, client.WithIdempotencyKey(key))
			}, noWait, func(w io.Writer, res types.CheckpointResult) {
				checkpointDetail(w, res.Checkpoint)
				row(w, "CURRENT:", res.Current)
				row(w, "VOLUME_FREEZE:", fmt.Sprintf("%dms", res.VolumeFreezeMS))
			}, func(res types.CheckpointResult) bool { return res.Conflict })
		},
	}
	take.Flags().StringVarP(&req.Message, "message", "m", "", "message of the checkpoint (and of its version)")
	take.Flags().BoolVar(&req.SetCurrent, "set-current", false, "make the checkpoint's version current (compare-and-swap, as a save)")
	take.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	take.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")

	show := &cobra.Command{
		Use:   "show PROJECT ID",
		Short: "Show one checkpoint of a project",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := checkpointArg(args[1])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Checkpoint, error) {
				return c.GetCheckpoint(ctx, args[0], id)
			}, checkpointDetail)
		},
	}
	rm := &cobra.Command{
		Use:   "rm PROJECT ID",
		Short: "Delete a checkpoint: its volume archives, and its version unless current, pinned or in use",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := checkpointArg(args[1])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Checkpoint, error) {
				return c.DeleteCheckpoint(ctx, args[0], id)
			}, one(checkpointTable))
		},
	}
	take.AddCommand(show, rm)

	ls := &cobra.Command{
		Use:   "checkpoints PROJECT",
		Short: "List a project's checkpoints, newest first",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Checkpoint, error) {
				return c.ListCheckpoints(ctx, args[0])
			}, all(checkpointTable))
		},
	}
	return []*cobra.Command{take, ls}
}

func checkpointArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usageError{fmt.Errorf("checkpoint %q: must be a positive integer", s)}
	}
	return n, nil
}

func checkpointTable(w io.Writer, cs ...types.Checkpoint) {
	row(w, "ID", "VERSION", "VOLUMES", "BYTES", "FREEZE", "INSTANCE", "CREATED", "MESSAGE")
	for _, c := range cs {
		row(w, c.ID, c.Version, len(c.Volumes), formatBytes(c.Bytes), fmt.Sprintf("%dms", c.FreezeMS), c.Instance, formatTime(c.CreatedAt), orDash(c.Message))
	}
}

func checkpointDetail(w io.Writer, c types.Checkpoint) {
	row(w, "CHECKPOINT:", c.ID)
	row(w, "PROJECT:", c.Project)
	row(w, "VERSION:", c.Version)
	row(w, "INSTANCE:", c.Instance)
	row(w, "MESSAGE:", orDash(c.Message))
	row(w, "FREEZE:", fmt.Sprintf("%dms", c.FreezeMS))
	row(w, "BYTES:", fmt.Sprintf("%s (version %s, volumes %s)", formatBytes(c.Bytes), formatBytes(c.VersionBytes), formatBytes(c.VolumeBytes)))
	for _, v := range c.Volumes {
		row(w, "VOLUME:", fmt.Sprintf("%s: %s, %d files, %s", v.Volume, formatBytes(v.Bytes), v.Files, v.Key))
	}
	row(w, "CREATED:", formatTime(c.CreatedAt))
}
