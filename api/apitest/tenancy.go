package apitest

import (
	"context"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// ListTokens answers two tokens of the tenant (tenant "t1" for ""): id 1
// an admin token, id 2 a plain one that expires a day after Epoch.
func (c *Core) ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error) {
	c.record("ListTokens", p, tenant)
	if tenant == "" {
		tenant = "t1"
	}
	exp := Epoch.Add(24 * time.Hour)
	return []types.TokenInfo{
		{ID: 1, Tenant: tenant, Admin: true, CreatedAt: Epoch, LastUsedAt: &Epoch},
		{ID: 2, Tenant: tenant, CreatedAt: Epoch, ExpiresAt: &exp},
	}, nil
}

// RevokeToken answers token id of the caller's tenant, revoked at Epoch.
func (c *Core) RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error) {
	c.record("RevokeToken", p, id)
	return types.TokenInfo{ID: id, Tenant: p.Tenant, CreatedAt: Epoch, RevokedAt: &Epoch}, nil
}

// ListArchives answers one archive named "a1" of the volume ("work" for
// all volumes).
func (c *Core) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	c.record("ListArchives", p, project, volume)
	if volume == "" {
		volume = "work"
	}
	return []types.VolumeArchive{{Key: "volumes/" + p.Tenant + "/" + project + "/" + volume + "/a1/0123456789abcdef.tar.zst",
		Bytes: 2048, Files: 3, Name: "a1", Project: project, Volume: volume, Node: "node-1", CreatedAt: Epoch}}, nil
}

// DeleteArchive answers the deleted archive.
func (c *Core) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	c.record("DeleteArchive", p, project, volume, name)
	return types.VolumeArchive{Name: name, Project: project, Volume: volume, CreatedAt: Epoch}, nil
}
