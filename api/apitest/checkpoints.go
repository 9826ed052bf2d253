package apitest

import (
	"context"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"
)

// Checkpoints is the fake CheckpointCore.
type Checkpoints struct {
	*Recorder
	ops *Operations
}

func fakeCheckpoint(project string, id int) types.Checkpoint {
	return types.Checkpoint{ID: id, Project: project, Version: id + 1, Instance: project + "-1", Message: "before the upgrade",
		Volumes:      []types.CheckpointVolume{{Volume: "work", Key: "checkpoints/t/" + project + "/work/0123456789abcdef.tar.zst", Bytes: 2048, Files: 3}},
		VersionBytes: 4096, VolumeBytes: 2048, Bytes: 6144, FreezeMS: 12, Node: "node-1", CreatedAt: Epoch}
}

func (c *Checkpoints) Checkpoint(ctx context.Context, p types.Principal, id string, req types.CheckpointRequest, key string) (types.Operation, error) {
	return echo(c, "Checkpoint", p, c.ops.NewOperation(types.OpKindCheckpoint, id), id, req, key)
}

func (c *Checkpoints) ListCheckpoints(ctx context.Context, p types.Principal, project string) ([]types.Checkpoint, error) {
	return echo(c, "ListCheckpoints", p, []types.Checkpoint{fakeCheckpoint(project, 2), fakeCheckpoint(project, 1)}, project)
}

func (c *Checkpoints) GetCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	return echo(c, "GetCheckpoint", p, fakeCheckpoint(project, id), project, id)
}

func (c *Checkpoints) DeleteCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	return echo(c, "DeleteCheckpoint", p, fakeCheckpoint(project, id), project, id)
}

// ExportCheckpoint writes "checkpoint layout of PROJECT-ID" as the export.
func (c *Checkpoints) ExportCheckpoint(ctx context.Context, p types.Principal, project string, id int, w io.Writer) error {
	if _, err := echo(c, "ExportCheckpoint", p, struct{}{}, project, id); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "checkpoint layout of %s-%d", project, id)
	return err
}

// ImportCheckpoint records the upload's bytes as its argument and answers
// checkpoint 3.
func (c *Checkpoints) ImportCheckpoint(ctx context.Context, p types.Principal, project string, archive io.Reader) (types.Checkpoint, error) {
	b, err := io.ReadAll(archive)
	if err != nil {
		return types.Checkpoint{}, err
	}
	return echo(c, "ImportCheckpoint", p, fakeCheckpoint(project, 3), project, string(b))
}
