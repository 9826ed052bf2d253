package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// ListTokens lists API tokens, never the tokens themselves: with an admin
// token, tenant's (every tenant's for "") through GET /v1/admin/tokens;
// otherwise use ListOwnTokens.
func (c *Client) ListTokens(ctx context.Context, tenant string) ([]types.TokenInfo, error) {
	path := "/v1/admin/tokens"
	if tenant != "" {
		path += "?tenant=" + url.QueryEscape(tenant)
	}
	return get[[]types.TokenInfo](ctx, c, path)
}

// ListOwnTokens lists the tokens of the caller's tenant (every tenant's
// for an admin): GET /v1/tokens.
func (c *Client) ListOwnTokens(ctx context.Context) ([]types.TokenInfo, error) {
	return get[[]types.TokenInfo](ctx, c, "/v1/tokens")
}

// RevokeToken revokes any token (admin token): DELETE /v1/admin/tokens/{id}.
func (c *Client) RevokeToken(ctx context.Context, id int64) (types.TokenInfo, error) {
	return post[types.TokenInfo](ctx, c, http.MethodDelete, "/v1/admin/tokens/"+strconv.FormatInt(id, 10), nil)
}

// RevokeOwnToken revokes a token of the caller's tenant: DELETE
// /v1/tokens/{id}.
func (c *Client) RevokeOwnToken(ctx context.Context, id int64) (types.TokenInfo, error) {
	return post[types.TokenInfo](ctx, c, http.MethodDelete, "/v1/tokens/"+strconv.FormatInt(id, 10), nil)
}

// ListArchives lists a project's volume archives, of one volume or of all
// (volume ""): GET /v1/projects/{p}[/volumes/{v}]/archives.
func (c *Client) ListArchives(ctx context.Context, project, volume string) ([]types.VolumeArchive, error) {
	path := "/v1/projects/" + esc(project)
	if volume != "" {
		path += "/volumes/" + esc(volume)
	}
	return get[[]types.VolumeArchive](ctx, c, path+"/archives")
}

// DeleteArchive deletes a volume archive: DELETE
// /v1/projects/{p}/volumes/{v}/archives/{name}.
func (c *Client) DeleteArchive(ctx context.Context, project, volume, name string) (types.VolumeArchive, error) {
	return post[types.VolumeArchive](ctx, c, http.MethodDelete,
		"/v1/projects/"+esc(project)+"/volumes/"+esc(volume)+"/archives/"+esc(name), nil)
}
