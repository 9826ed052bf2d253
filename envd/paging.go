package envd

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Page tokens are opaque to clients: base64url of "v1.<number>" for
// versions and "i1.<unix microseconds>.<id>" for instances, the last item
// of the page (lists are ordered by number and by creation time, id).
// Keyset pages stay correct while items are added or removed between
// calls: none is skipped or repeated.

func pageLimit(page types.Page) (int, error) {
	switch {
	case page.Limit < 0 || page.Limit > types.MaxPageLimit:
		return 0, fmt.Errorf("limit %d: must be 1 to %d: %w", page.Limit, types.MaxPageLimit, errdefs.ErrInvalidArgument)
	case page.Limit == 0:
		return types.DefaultPageLimit, nil
	}
	return page.Limit, nil
}

func badToken(tok string) error {
	return fmt.Errorf("page_token %q: not a token this list gave: %w", tok, errdefs.ErrInvalidArgument)
}

func decodeToken(tok, kind string) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, badToken(tok)
	}
	parts := strings.Split(string(b), ".")
	if parts[0] != kind {
		return nil, badToken(tok)
	}
	return parts[1:], nil
}

func encodeToken(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, ".")))
}

// ListVersionsPage is one page of ListVersions and the token of the next
// one ("" after the last).
func (s *Service) ListVersionsPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Version, string, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, "", err
	}
	limit, err := pageLimit(page)
	if err != nil {
		return nil, "", err
	}
	after := 0
	if page.Token != "" {
		parts, err := decodeToken(page.Token, "v1")
		if err != nil {
			return nil, "", err
		}
		if len(parts) != 1 {
			return nil, "", badToken(page.Token)
		}
		if after, err = strconv.Atoi(parts[0]); err != nil || after < 0 {
			return nil, "", badToken(page.Token)
		}
	}
	vs, err := s.store.Versions.ListVersionsAfter(ctx, p.Tenant, project, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(vs) > limit {
		vs = vs[:limit]
		next = encodeToken("v1", strconv.Itoa(vs[limit-1].Number))
	}
	out := make([]types.Version, 0, len(vs))
	for _, v := range vs {
		out = append(out, toVersion(v))
	}
	return out, next, nil
}

// ListInstancesPage is one page of ListInstances and the token of the next
// one ("" after the last).
func (s *Service) ListInstancesPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Instance, string, error) {
	limit, err := pageLimit(page)
	if err != nil {
		return nil, "", err
	}
	var after versions.InstanceCursor
	if page.Token != "" {
		parts, err := decodeToken(page.Token, "i1")
		if err != nil {
			return nil, "", err
		}
		if len(parts) != 2 {
			return nil, "", badToken(page.Token)
		}
		us, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil || parts[1] == "" {
			return nil, "", badToken(page.Token)
		}
		after = versions.InstanceCursor{CreatedAt: time.UnixMicro(us), ID: parts[1]}
	}
	ins, err := s.life.ListInstancesAfter(ctx, p, project, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ins) > limit {
		ins = ins[:limit]
		last := ins[limit-1]
		next = encodeToken("i1", strconv.FormatInt(last.CreatedAt.UnixMicro(), 10), last.ID)
	}
	return ins, next, nil
}
