package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// ListVersionsPage is one page of GET /v1/projects/{p}/versions (by
// number) and the next page's token ("" after the last).
func (c *Client) ListVersionsPage(ctx context.Context, project string, page types.Page) ([]types.Version, string, error) {
	return listPage[types.Version](ctx, c, "/v1/projects/"+esc(project)+"/versions", page)
}

// ListInstancesPage is one page of GET /v1/instances (of project's when
// project is not "") and the next page's token ("" after the last).
func (c *Client) ListInstancesPage(ctx context.Context, project string, page types.Page) ([]types.Instance, string, error) {
	path := "/v1/instances"
	if project != "" {
		path = "/v1/projects/" + esc(project) + "/instances"
	}
	return listPage[types.Instance](ctx, c, path, page)
}

func listPage[T any](ctx context.Context, c *Client, path string, page types.Page) ([]T, string, error) {
	q := url.Values{}
	if page.Limit > 0 || page.Token == "" {
		limit := page.Limit
		if limit == 0 {
			limit = types.DefaultPageLimit // a page, never the whole list
		}
		q.Set("limit", strconv.Itoa(limit))
	}
	if page.Token != "" {
		q.Set("page_token", page.Token)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var v []T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, "", fmt.Errorf("GET %s: decode response: %w", path, err)
	}
	return v, NextPageToken(resp.Header.Get("Link")), nil
}

var nextLink = regexp.MustCompile(`<([^>]+)>\s*;\s*rel="next"`)

// NextPageToken is the page_token of a Link header's rel="next" URL (RFC
// 8288); "" when there is none.
func NextPageToken(link string) string {
	m := nextLink.FindStringSubmatch(link)
	if m == nil {
		return ""
	}
	u, err := url.Parse(m[1])
	if err != nil {
		return ""
	}
	return u.Query().Get("page_token")
}
