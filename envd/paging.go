package envd

import (
	"context"
	"strconv"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/paging"
	"github.com/envd-dev/envd/envd/views"
)

// ListVersionsPage is one page of ListVersions and the token of the next
// one ("" after the last).
func (s *Service) ListVersionsPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Version, string, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(page)
	if err != nil {
		return nil, "", err
	}
	after := 0
	if page.Token != "" {
		parts, err := paging.Decode(page.Token, "v1")
		if err != nil {
			return nil, "", err
		}
		if len(parts) != 1 {
			return nil, "", paging.BadToken(page.Token)
		}
		if after, err = strconv.Atoi(parts[0]); err != nil || after < 0 {
			return nil, "", paging.BadToken(page.Token)
		}
	}
	vs, err := s.store.Versions.ListVersionsAfter(ctx, p.Tenant, project, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(vs) > limit {
		vs = vs[:limit]
		next = paging.Encode("v1", strconv.Itoa(vs[limit-1].Number))
	}
	out := make([]types.Version, 0, len(vs))
	for _, v := range vs {
		out = append(out, views.Version(v))
	}
	return out, next, nil
}
