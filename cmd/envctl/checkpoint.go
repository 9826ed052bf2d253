package main

import (
	"context"
	"fmt"
	"io"
	"os"
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
		Use:   "checkpoint INSTANCE [-m MSG] [--set-current] [--memory] | checkpoint show|rm|export PROJECT ID | checkpoint import PROJECT FILE",
		Short: "Freeze an instance once and keep its rootfs and its volumes from that moment, together",
		Long: `Take a coordinated checkpoint of an instance: its processes are frozen once,
and at that moment its root filesystem is saved as a version and every volume
of its project is copied; the volumes are archived to object storage. The
version and the archives are one checkpoint: "envctl up PROJECT --checkpoint
ID" starts from both, "envctl volume restore PROJECT VOLUME --checkpoint ID"
brings one volume back, and retention, gc and "checkpoint rm" keep or delete
them together.

The version does not become current unless --set-current (then by
compare-and-swap, as a save: exit code 3 when current had moved).

With --memory the checkpoint also holds the instance's processes (their
memory, open files, sockets), taken at the same freeze and stored in the
registry: "envctl up PROJECT --checkpoint ID" then continues them instead of
starting the image's init, on this node or any other. Instances of the
gvisor runtime class only; others are refused (memory_checkpoint_unsupported)
before anything is made.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "checkpoint", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.Checkpoint(ctx, args[0], req, client.WithIdempotencyKey(key))
			}, noWait, func(w io.Writer, res types.CheckpointResult) {
				checkpointDetail(w, res.Checkpoint)
				row(w, "CURRENT:", res.Current)
				row(w, "VOLUME_FREEZE:", fmt.Sprintf("%dms", res.VolumeFreezeMS))
				if res.Checkpoint.Memory != nil {
					row(w, "MEMORY_PUSH:", fmt.Sprintf("%dms", res.MemoryPushMS))
				}
			}, func(res types.CheckpointResult) bool { return res.Conflict })
		},
	}
	take.Flags().StringVarP(&req.Message, "message", "m", "", "message of the checkpoint (and of its version)")
	take.Flags().BoolVar(&req.SetCurrent, "set-current", false, "make the checkpoint's version current (compare-and-swap, as a save)")
	take.Flags().BoolVar(&req.Memory, "memory", false, "also keep the instance's processes (gvisor class): up --checkpoint ID continues them")
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
	var out string
	export := &cobra.Command{
		Use:         "export PROJECT ID -o FILE",
		Annotations: map[string]string{outputIsFile: "yes"},
		Example: `  envctl checkpoint export web 2 -o web-2.ckpt.tar
  envctl checkpoint export web 2 -o - | ssh other envctl checkpoint import web -`,
		Short: "Write a checkpoint (its version and its memory image) as a tar, for checkpoint import elsewhere",
		Long: `Write checkpoint ID of PROJECT as a tar of an OCI image layout: its version's
image (layers as stored) and, for a checkpoint taken with --memory, its memory
image (index and chunks). "envctl checkpoint import PROJECT FILE" on another
installation makes it a checkpoint there, which "envctl up PROJECT --checkpoint
ID" resumes with its processes. Volume archives are not included. Here -o (or
-f) names the file to write; -o - writes to stdout.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := checkpointArg(args[1])
			if err != nil {
				return err
			}
			return a.exportTo(cmd, out, func(c *client.Client, w io.Writer) (int64, error) {
				return c.ExportCheckpoint(cmd.Context(), args[0], id, w)
			})
		},
	}
	export.Flags().StringVarP(&out, "file", "f", "", "the tar to write; - for stdout")
	imp := &cobra.Command{
		Use:   "import PROJECT FILE",
		Short: "Make a checkpoint of PROJECT from a tar checkpoint export wrote (- reads stdin)",
		Long: `Import a checkpoint that "envctl checkpoint export" wrote, here or on another
installation, into PROJECT (which must exist; for a checkpoint with memory, of
the gvisor runtime class). Every blob is checked against its digest before
anything is stored: a truncated or corrupted file is refused (invalid_argument,
reason archive_corrupt), and one that would take the tenant past its stored
bytes quota is refused (quota_exceeded) before anything is written. The new
checkpoint gets the project's next id; its version does not become current.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = a.stdin
			if args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Checkpoint, error) {
				return c.ImportCheckpoint(ctx, args[0], in)
			}, checkpointDetail)
		},
	}
	take.AddCommand(show, rm, export, imp)

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
	if m := c.Memory; m != nil {
		row(w, "MEMORY:", fmt.Sprintf("%s (%s new), frozen %dms to write, %s", formatBytes(m.Bytes), formatBytes(m.NewBytes), m.FreezeMS, m.Image))
		if m.ResumedBy != "" {
			row(w, "RESUMED_BY:", m.ResumedBy)
		}
	}
	row(w, "CREATED:", formatTime(c.CreatedAt))
}
