package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// VersionSpec answers a build spec that makes version n of project again:
// GET /v1/projects/{p}/versions/{n}/spec.
func (c *Client) VersionSpec(ctx context.Context, project string, n int) (types.VersionSpec, error) {
	return get[types.VersionSpec](ctx, c, "/v1/projects/"+esc(project)+"/versions/"+strconv.Itoa(n)+"/spec")
}

// UploadBuildContext sends a tar as a build context of project (POST
// /v1/projects/{p}/build-contexts); a build's spec names the answer's
// Context, and its files take their content from the tar's files.
func (c *Client) UploadBuildContext(ctx context.Context, project string, tarball io.Reader) (types.BuildContext, error) {
	return sendDecode[types.BuildContext](ctx, c, request{
		method: http.MethodPost, path: "/v1/projects/" + esc(project) + "/build-contexts",
		body: tarball, contentType: "application/x-tar",
	}, fmt.Sprintf("upload build context of %q", project))
}

// OperationLogs writes the operation's log (a build's output) to w: GET
// /v1/operations/{id}/logs. It returns the bytes written.
func (c *Client) OperationLogs(ctx context.Context, id string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/operations/" + esc(id) + "/logs"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("log of operation %s: %w", id, err)
	}
	return n, nil
}
