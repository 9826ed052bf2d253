package api_test

import (
	"net/http"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The token and archive routes: /v1/admin/... needs an admin token before
// the core is asked, ids are checked, and each route reaches the core with
// the tenant, id, project, volume and name of its path.
func TestTokenAndArchiveRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		admin      bool
		method     string
		path       string
		wantStatus int
		wantCode   string
		wantCall   string
		wantArgs   []any
	}{
		{"admin lists a tenant's tokens", true, http.MethodGet, "/v1/admin/tokens?tenant=acme", 200, "", "ListTokens", []any{"acme"}},
		{"admin lists by path", true, http.MethodGet, "/v1/admin/tenants/acme/tokens", 200, "", "ListTokens", []any{"acme"}},
		{"admin lists all", true, http.MethodGet, "/v1/admin/tokens", 200, "", "ListTokens", []any{""}},
		{"tenant on the admin list", false, http.MethodGet, "/v1/admin/tokens", 403, "permission_denied", "", nil},
		{"tenant lists its own", false, http.MethodGet, "/v1/tokens", 200, "", "ListTokens", []any{""}},
		{"admin revokes", true, http.MethodDelete, "/v1/admin/tokens/7", 200, "", "RevokeToken", []any{int64(7)}},
		{"tenant on the admin revoke", false, http.MethodDelete, "/v1/admin/tokens/7", 403, "permission_denied", "", nil},
		{"tenant revokes its own", false, http.MethodDelete, "/v1/tokens/7", 200, "", "RevokeToken", []any{int64(7)}},
		{"id not a number", false, http.MethodDelete, "/v1/tokens/x", 400, "invalid_argument", "", nil},
		{"id zero", true, http.MethodDelete, "/v1/admin/tokens/0", 400, "invalid_argument", "", nil},
		{"project archives", false, http.MethodGet, "/v1/projects/web/archives", 200, "", "ListArchives", []any{"web", ""}},
		{"volume archives", false, http.MethodGet, "/v1/projects/web/volumes/work/archives", 200, "", "ListArchives", []any{"web", "work"}},
		{"delete archive", false, http.MethodDelete, "/v1/projects/web/volumes/work/archives/a1", 200, "", "DeleteArchive", []any{"web", "work", "a1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			core, srv := newServer(t)
			core.Auth.Principal = types.Principal{Tenant: "t1", Admin: tt.admin}
			r := do(t, srv, tt.method, tt.path, nil, nil)
			require.Equal(t, tt.wantStatus, r.status, "body %s", r.body)
			if tt.wantCode != "" {
				assert.Equal(t, tt.wantCode, errorOf(t, r).Code)
			}
			for _, m := range []string{"ListTokens", "RevokeToken", "ListArchives", "DeleteArchive"} {
				call, called := core.LastCall(m)
				if m != tt.wantCall {
					assert.False(t, called, "%s called", m)
					continue
				}
				require.True(t, called)
				assert.Equal(t, tt.wantArgs, call.Args)
				assert.Equal(t, core.Auth.Principal, call.Principal)
			}
		})
	}
}
