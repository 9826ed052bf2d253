// Package paging holds the page tokens of envd's keyset-paged lists.
//
// Page tokens are opaque to clients: base64url of "v1.<number>" for
// versions and "i1.<unix microseconds>.<id>" for instances, the last item
// of the page (lists are ordered by number and by creation time, id).
// Keyset pages stay correct while items are added or removed between
// calls: none is skipped or repeated.
package paging

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Limit is page's limit, types.DefaultPageLimit for none; outside 0 to
// types.MaxPageLimit it is an ErrInvalidArgument.
func Limit(page types.Page) (int, error) {
	switch {
	case page.Limit < 0 || page.Limit > types.MaxPageLimit:
		return 0, fmt.Errorf("limit %d: must be 1 to %d: %w", page.Limit, types.MaxPageLimit, errdefs.ErrInvalidArgument)
	case page.Limit == 0:
		return types.DefaultPageLimit, nil
	}
	return page.Limit, nil
}

// BadToken is the error of a token no list of this kind gave.
func BadToken(tok string) error {
	return fmt.Errorf("page_token %q: not a token this list gave: %w", tok, errdefs.ErrInvalidArgument)
}

// Decode returns the fields of tok after its kind; a token of another
// kind, or none at all, is BadToken.
func Decode(tok, kind string) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, BadToken(tok)
	}
	parts := strings.Split(string(b), ".")
	if parts[0] != kind {
		return nil, BadToken(tok)
	}
	return parts[1:], nil
}

// Encode makes a token of its parts, the kind first.
func Encode(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, ".")))
}
