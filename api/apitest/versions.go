package apitest

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// Versions is the fake VersionCore. Save, Fork, Build and Migrate start
// running operations.
type Versions struct {
	*Recorder
	ops              *Operations
	SaveFunc         func(ctx context.Context, id string, req types.SaveRequest, key string) (types.Operation, error)
	MigrateFunc      func(ctx context.Context, project string, req types.MigrateRequest, key string) (types.Operation, error)
	ListVersionsFunc func(ctx context.Context, project string) ([]types.Version, error)
	SetCurrentFunc   func(ctx context.Context, project string, req types.SetCurrentRequest) (types.Project, error)
}

func (c *Versions) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, key string) (types.Operation, error) {
	c.record("Save", p, id, req, key)
	if c.SaveFunc != nil {
		return c.SaveFunc(ctx, id, req, key)
	}
	return c.ops.NewOperation("save", id), nil
}

func (c *Versions) Fork(ctx context.Context, p types.Principal, id string, req types.ForkRequest, key string) (types.Operation, error) {
	return echo(c, "Fork", p, c.ops.NewOperation(types.OpKindFork, id), id, req, key)
}

func (c *Versions) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, key string) (types.Operation, error) {
	return echo(c, "Build", p, c.ops.NewOperation("build", project), project, req, key)
}

func (c *Versions) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, key string) (types.Operation, error) {
	if c.MigrateFunc != nil {
		c.record("Migrate", p, project, req, key)
		return c.MigrateFunc(ctx, project, req, key)
	}
	return echo(c, "Migrate", p, c.ops.NewOperation("migrate", project), project, req, key)
}

func (c *Versions) ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error) {
	c.record("ListVersions", p, project)
	if c.ListVersionsFunc != nil {
		return c.ListVersionsFunc(ctx, project)
	}
	return nil, nil
}

func (c *Versions) GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error) {
	return echo(c, "GetVersion", p, types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", CreatedAt: Epoch}, project, n)
}

func (c *Versions) SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error) {
	c.record("SetCurrent", p, project, req)
	if c.SetCurrentFunc != nil {
		return c.SetCurrentFunc(ctx, project, req)
	}
	return types.Project{Name: project, Current: req.Version, CreatedAt: Epoch}, nil
}

func (c *Versions) PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error) {
	return echo(c, "PinVersion", p, types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", Pinned: pinned,
		CreatedAt: Epoch}, project, n, pinned)
}

// VersionChanges answers no changes between the two versions.
func (c *Versions) VersionChanges(ctx context.Context, p types.Principal, project string, n, against, limit int) (types.Changes, error) {
	return echo(c, "VersionChanges", p, types.Changes{Project: project, Version: n, Against: against,
		Added: []types.FileChange{}, Modified: []types.FileChange{}, Deleted: []types.FileChange{},
		Summarized: []types.DirSummary{}, TopDirs: []types.DirBytes{}}, project, n, against, limit)
}

// InstanceChanges answers no changes against version 1.
func (c *Versions) InstanceChanges(ctx context.Context, p types.Principal, id string, limit int) (types.Changes, error) {
	return echo(c, "InstanceChanges", p, types.Changes{Project: "p", Instance: id, Against: 1,
		Added: []types.FileChange{}, Modified: []types.FileChange{}, Deleted: []types.FileChange{},
		Summarized: []types.DirSummary{}, TopDirs: []types.DirBytes{},
		Excluded: []types.ExcludedPath{{Path: "/proc", Reason: "runtime mount point"}}}, id, limit)
}

// ExportVersion writes "oci layout of PROJECT-N" as the export.
func (c *Versions) ExportVersion(ctx context.Context, p types.Principal, project string, n int, w io.Writer) error {
	_, err := echo(c, "ExportVersion", p, struct{}{}, project, n)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "oci layout of %s-%d", project, n)
	return err
}

// ListVersionsPage answers one version per page, numbered from the token
// ("" = 1) up to 3, so that a test can follow the pages.
func (c *Versions) ListVersionsPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Version, string, error) {
	c.record("ListVersionsPage", p, project, page)
	n := 1
	if page.Token != "" {
		n, _ = strconv.Atoi(page.Token)
	}
	next := ""
	if n < 3 {
		next = strconv.Itoa(n + 1)
	}
	return []types.Version{{Project: project, Number: n, Kind: "snapshot", State: "ready", CreatedAt: Epoch}}, next, nil
}
