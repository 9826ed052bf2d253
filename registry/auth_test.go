package registry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// TestAccess checks, against the embedded registry, who may do what: no
// credential or a wrong one gets 401 with a Basic challenge for every kind
// of request; the node credential pulls and pushes but neither deletes nor
// lists the catalog; the GC credential deletes.
func TestAccess(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	a := srv.Access()
	ctx := context.Background()

	// An image to pull and delete, pushed with the node credential.
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("hello"), 0o644))
	node, err := NewClient(srv.Addr(), WithCredential(a.Node))
	require.NoError(t, err)
	img, err := node.ImportRootfs(ctx, src, "envd/images/acc", "t1")
	require.NoError(t, err, "the node credential pushes")
	_, err = node.Get(ctx, img.Ref())
	require.NoError(t, err, "the node credential pulls")
	require.NoError(t, node.Verify(ctx, img), "the node credential reads blobs")

	manifest := "/v2/envd/images/acc/manifests/" + img.Digest
	blob := "/v2/envd/images/acc/blobs/" + img.Layers[0].Digest
	requests := []struct {
		name, method, path string
	}{
		{"base", http.MethodGet, "/v2/"},
		{"pull manifest", http.MethodGet, manifest},
		{"head manifest", http.MethodHead, manifest},
		{"pull blob", http.MethodGet, blob},
		{"push (start upload)", http.MethodPost, "/v2/envd/images/acc/blobs/uploads/"},
		{"push manifest", http.MethodPut, "/v2/envd/images/acc/manifests/t2"},
		{"catalog", http.MethodGet, "/v2/_catalog"},
		{"tags", http.MethodGet, "/v2/envd/images/acc/tags/list"},
		{"delete manifest", http.MethodDelete, manifest},
		{"delete blob", http.MethodDelete, blob},
	}
	for _, cred := range []struct {
		name string
		c    *Credential
	}{
		{"no credential", nil},
		{"wrong password", &Credential{User: a.Node.User, Password: a.Node.Password + "x"}},
		{"wrong user", &Credential{User: "admin", Password: a.Node.Password}},
		{"node user with gc password", &Credential{User: a.Node.User, Password: a.GC.Password}},
		{"empty", &Credential{}},
	} {
		for _, rq := range requests {
			t.Run(cred.name+"/"+rq.name, func(t *testing.T) {
				resp := do(t, srv, rq.method, rq.path, cred.c)
				assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
				assert.Equal(t, `Basic realm="envd"`, resp.Header.Get("WWW-Authenticate"))
			})
		}
	}

	t.Run("catalog is off for every credential", func(t *testing.T) {
		for _, c := range []Credential{a.Node, a.GC} {
			for _, p := range []string{"/v2/_catalog", "/v2/_catalog?n=10", "/v2//_catalog", "/v2/_catalog/", "/v2/%5Fcatalog"} {
				resp := do(t, srv, http.MethodGet, p, &c)
				assert.Contains(t, []int{http.StatusNotFound, http.StatusMovedPermanently}, resp.StatusCode, "%s as %s", p, c.User)
				if resp.StatusCode == http.StatusMovedPermanently {
					// A redirect to the clean path, which is refused in turn.
					assert.Equal(t, "/v2/_catalog", resp.Header.Get("Location"))
				}
			}
		}
	})

	t.Run("node credential cannot delete", func(t *testing.T) {
		for _, p := range []string{manifest, blob} {
			resp := do(t, srv, http.MethodDelete, p, &a.Node)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, p)
		}
		err := node.DeleteManifest(ctx, img)
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
		_, err = node.Get(ctx, img.Ref())
		assert.NoError(t, err, "the manifest is still there")
	})

	t.Run("gc credential deletes", func(t *testing.T) {
		gc, err := NewClient(srv.Addr(), WithCredential(a.Node), WithDeleteCredential(a.GC))
		require.NoError(t, err)
		require.NoError(t, gc.DeleteManifest(ctx, img))
		_, err = node.Get(ctx, img.Ref())
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})
}

// do sends one request to srv, with cred as HTTP Basic unless nil, and
// returns the response with its body read and closed.
func do(t *testing.T, srv *Server, method, path string, cred *Credential) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+srv.Addr()+path, nil)
	require.NoError(t, err)
	if cred != nil {
		req.SetBasicAuth(cred.User, cred.Password)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

func TestWithAccessRejectsBadCredentials(t *testing.T) {
	t.Parallel()
	good := NewAccess()
	tests := []struct {
		name string
		a    Access
	}{
		{"no node password", Access{Node: Credential{User: "n"}, GC: good.GC}},
		{"no gc user", Access{Node: good.Node, GC: Credential{Password: "p"}}},
		{"same credential twice", Access{Node: good.Node, GC: good.Node}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0", WithAccess(tt.a))
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		})
	}
}

func TestCredentialFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "cred")
	c, err := LoadOrCreateCredentialFile(p, NodeUser)
	require.NoError(t, err)
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Equal(t, NodeUser, c.User)
	assert.GreaterOrEqual(t, len(c.Password), 26, "130 bits of rand.Text")
	assert.NotContains(t, c.String(), c.Password)
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v %s", c, c, c, []Credential{c}), c.Password)

	again, err := LoadOrCreateCredentialFile(p, NodeUser)
	require.NoError(t, err)
	assert.Equal(t, c, again, "kept across restarts")

	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    error
	}{
		{"readable by others", "u:p\n", 0o644, errdefs.ErrPermissionDenied},
		{"readable by group", "u:p\n", 0o640, errdefs.ErrPermissionDenied},
		{"no colon", "up\n", 0o600, errdefs.ErrInvalidArgument},
		{"empty password", "u:\n", 0o600, errdefs.ErrInvalidArgument},
		{"empty", "", 0o600, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(dir, tt.name)
			require.NoError(t, os.WriteFile(f, []byte(tt.content), tt.mode))
			require.NoError(t, os.Chmod(f, tt.mode))
			_, err := ReadCredentialFile(f)
			assert.ErrorIs(t, err, tt.want)
		})
	}
	_, err = ReadCredentialFile(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func TestPing(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	a := srv.Access()
	tests := []struct {
		name string
		opts []ClientOption
		want error
	}{
		{"node credential", []ClientOption{WithCredential(a.Node)}, nil},
		{"gc credential", []ClientOption{WithCredential(a.GC)}, nil},
		{"anonymous", nil, errdefs.ErrUnauthenticated},
		{"wrong password", []ClientOption{WithCredential(Credential{User: a.Node.User, Password: "x"})}, errdefs.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(srv.Addr(), tt.opts...)
			require.NoError(t, err)
			err = c.Ping(context.Background())
			if tt.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tt.want)
			}
		})
	}
	closed := startRegistry(t)
	require.NoError(t, closed.Close(context.Background()))
	c, err := NewClient(closed.Addr())
	require.NoError(t, err)
	assert.ErrorIs(t, c.Ping(context.Background()), errdefs.ErrUnavailable)
}

// NewClient refuses an invalid option instead of ignoring it; zero
// credentials are anonymous, as without the option.
func TestNewClientOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  ClientOption
		want error
	}{
		{"nil transport", WithTransport(nil), errdefs.ErrInvalidArgument},
		{"no attempt", WithRetryBackoff(remote.Backoff{Steps: 0}), errdefs.ErrInvalidArgument},
		{"negative backoff", WithRetryBackoff(remote.Backoff{Steps: 2, Duration: -time.Second}), errdefs.ErrInvalidArgument},
		{"user without password", WithCredential(Credential{User: NodeUser}), errdefs.ErrInvalidArgument},
		{"delete password without user", WithDeleteCredential(Credential{Password: "p"}), errdefs.ErrInvalidArgument},
		{"one attempt", WithRetryBackoff(remote.Backoff{Steps: 1}), nil},
		{"zero credential", WithCredential(Credential{}), nil},
		{"transport", WithTransport(http.DefaultTransport), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient("127.0.0.1:5000", tt.opt)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
				assert.Nil(t, c)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "127.0.0.1:5000", c.Addr())
		})
	}
}
