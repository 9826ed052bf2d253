package api

import (
	"fmt"
	"net/url"

	"github.com/envd-dev/envd/api/types"
)

// page reads ?limit=N&page_token=T; ok is false when neither is given
// (the whole list, as before lists paged).
func (r in) page() (types.Page, bool, error) {
	_, hasLimit := r.c.GetQuery("limit")
	tok, hasToken := r.c.GetQuery("page_token")
	if !hasLimit && !hasToken {
		return types.Page{}, false, nil
	}
	n, err := r.queryInt("limit")
	if err != nil {
		return types.Page{}, false, err
	}
	if hasLimit && (n < 1 || n > types.MaxPageLimit) {
		return types.Page{}, false, invalidArgument("query parameter limit %d: must be 1 to %d", n, types.MaxPageLimit)
	}
	return types.Page{Limit: n, Token: tok}, true, nil
}

// paged answers one page of a list; when there is a next one, a Link
// header (RFC 8288, rel="next", as GitHub's API pages) names the same URL
// with its page_token.
func paged[T any](r in, list func() ([]T, string, error)) ([]T, error) {
	v, next, err := items3(list())
	if err != nil || next == "" {
		return v, err
	}
	u := *r.c.Request.URL
	q := u.Query()
	q.Set("page_token", next)
	u.RawQuery = q.Encode()
	r.c.Header("Link", fmt.Sprintf(`<%s>; rel="next"`, (&url.URL{Path: u.Path, RawQuery: u.RawQuery}).String()))
	return v, nil
}

func items3[T any](v []T, next string, err error) ([]T, string, error) {
	v, err = items(v, err)
	return v, next, err
}
