package e2e

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/netns"
)

// headerServer serves HTTP inside the private service's namespace and
// keeps the X-Api-Key of the last request on the test's side: the
// instance gets "ok" only, so a secret found in it came by another way.
type headerServer struct {
	mu   sync.Mutex
	last string
	n    int
}

func (h *headerServer) lastKey() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.n
}

func (s *privateService) serveHeaders(t *testing.T, addr string) *headerServer {
	t.Helper()
	ln, err := netns.Listen("/run/netns/"+s.name, "tcp4", addr)
	require.NoError(t, err)
	h := &headerServer{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.last, h.n = r.Header.Get("X-Api-Key"), h.n+1
		h.mu.Unlock()
		fmt.Fprintln(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

// TestRootEgressByNameAndSecrets: a project allowed only *.allowed.test
// (names from the test's resolver on loopback, the node's upstream)
// reaches a name below it and not another name at the same address; the
// refusal is in the project's egress log. A secret bound to the host
// reaches the server as a header, rotation and revocation apply to the
// next request, and the value is nowhere in the instance: not in its
// files, its processes' environments, nor the layer a save makes.
func TestRootEgressByNameAndSecrets(t *testing.T) {
	t.Parallel()
	svc := newPrivateService(t)
	hs := svc.serveHeaders(t, svc.addr+":80")
	env.dns.Set("api.allowed.test", svc.addr)
	env.dns.Set("other.test", svc.addr)
	p := projectWithNetwork(t, "egname", "allow:*.allowed.test")
	in := up(t, p, 0)

	// get sends GET / with Host host to the service's address from the
	// instance and returns the status line.
	get := func(host string) string {
		res := sh(t, in.ID, fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s 80`, host, svc.addr))
		status, _, _ := strings.Cut(res.Stdout, "\r\n")
		t.Logf("GET %s: %q (exit %d)", host, status, res.ExitCode)
		return status
	}

	b := make([]byte, 12)
	_, _ = rand.Read(b)
	one, two := "sk1"+hex.EncodeToString(b), "sk2"+hex.EncodeToString(b)
	name := fmt.Sprintf("apikey-%d", projectSeq.Add(1))
	_, err := env.c.SetSecret(ctx(t), name, one)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteSecret(ctx(t), name) })
	_, err = env.c.BindSecret(ctx(t), name, types.SecretBinding{Host: "api.allowed.test", Scheme: "ftp"})
	require.Error(t, err, "a scheme other than http and https is refused")
	assert.Contains(t, err.Error(), "invalid_argument")
	sec, err := env.c.BindSecret(ctx(t), name, types.SecretBinding{Host: "api.allowed.test", Header: "X-Api-Key", Format: "{{value}}"})
	require.NoError(t, err)
	require.NotNil(t, sec.Binding)
	assert.Equal(t, "api.allowed.test", sec.Binding.Host)
	list, err := env.c.ListSecrets(ctx(t))
	require.NoError(t, err)
	listed, _ := json.Marshal(list)
	assert.Contains(t, string(listed), name)
	assert.NotContains(t, string(listed), one, "the API never returns a value")

	assert.Equal(t, "HTTP/1.1 200 OK", get("api.allowed.test"))
	key, _ := hs.lastKey()
	assert.Equal(t, one, key, "the bound secret reaches the server as a header")

	// Not another name at the same address; the refusal is logged.
	_, before := hs.lastKey()
	assert.Equal(t, "HTTP/1.1 403 Forbidden", get("other.test"))
	_, after := hs.lastKey()
	assert.Equal(t, before, after, "the refused request did not reach the server")
	require.Eventually(t, func() bool {
		log, err := env.c.EgressLog(ctx(t), p, 10)
		require.NoError(t, err)
		for _, d := range log {
			if d.Kind == "http" && d.Name == "other.test" && d.Instance == in.ID {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the denial is in the project's egress log")

	_, err = env.c.SetSecret(ctx(t), name, two)
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 200 OK", get("api.allowed.test"))
	key, _ = hs.lastKey()
	assert.Equal(t, two, key, "a rotation applies to the next request")

	// The values are not in the instance: files, environments, saved layer.
	pattern := " -e " + one + " -e " + two
	files := sh(t, in.ID, "grep -rlsF"+pattern+" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev")
	assert.Empty(t, files.Stdout, "files of the instance holding the secret")
	envs := sh(t, in.ID, "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -F"+pattern)
	assert.Empty(t, envs.Stdout, "environments in the instance holding the secret")
	mustSh(t, in.ID, "echo saved > /egress-marker")
	_, saved := save(t, in.ID, "after secret use")
	tarBytes := topLayerTar(t, p, saved.Version)
	require.Contains(t, tarBytes, "egress-marker", "the layer read is the saved one")
	assert.NotContains(t, tarBytes, one)
	assert.NotContains(t, tarBytes, two)

	_, err = env.c.DeleteSecret(ctx(t), name)
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 200 OK", get("api.allowed.test"))
	key, _ = hs.lastKey()
	assert.Empty(t, key, "a revocation applies to the next request")
}

// topLayerTar is the uncompressed tar of version's top layer, read from
// the node's registry.
func topLayerTar(t *testing.T, project string, version int) string {
	t.Helper()
	img, layer := topLayer(t, project, version)
	repo := strings.SplitN(img.Repo, "@", 2)[0]
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, fmt.Sprintf("http://%s/v2/%s/blobs/%s", env.node.RegistryAddr(), repo, layer), nil)
	require.NoError(t, err)
	setNodeAuth(t, req, env.node)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	tarBytes, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(tarBytes)
}

// TestRootEgressSecretRotationAcrossNodes: an instance on node B sends
// plain HTTP to a bound host through B's egress proxy; the secret is
// rotated, rebound and revoked through node A's API, and B's proxy, whose
// lookups come from its secret cache, applies each change within seconds:
// A's change reaches B's cache through the database's notification, which
// is asynchronous. Quiet, the very next request sees it; at CI's load
// (15-20) a request sometimes came first, so each change is awaited over
// at most 10 s of requests, and the count it took is logged.
func TestRootEgressSecretRotationAcrossNodes(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	svc := newPrivateService(t)
	hs := svc.serveHeaders(t, svc.addr+":80")
	env.dns.Set("api.rotate.test", svc.addr)
	_, cb := startJoiningNode(t, "node-egress-b", &node.Config{DefaultTTL: time.Hour, EgressResolvers: []string{env.dns.Addr},
		SecretKeyFile: filepath.Join(env.node.DataDir(), "secret.key")})
	p := projectWithNetwork(t, "egrotate", "allow:api.rotate.test")
	in, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cb.DeleteInstance(context.Background(), in.ID) })
	require.Equal(t, "node-egress-b", in.Node)
	get := func() string {
		_, before := hs.lastKey()
		res, err := cb.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c",
			fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: api.rotate.test\r\n\r\n' | nc -w 5 %s 80`, svc.addr)}})
		require.NoError(t, err)
		status, _, _ := strings.Cut(res.Stdout, "\r\n")
		require.Equal(t, "HTTP/1.1 200 OK", status, res.Stderr)
		key, after := hs.lastKey()
		require.Equal(t, before+1, after, "the request reached the server")
		return key
	}

	b := make([]byte, 12)
	_, _ = rand.Read(b)
	one, two := "sk1"+hex.EncodeToString(b), "sk2"+hex.EncodeToString(b)
	name := fmt.Sprintf("rotkey-%d", projectSeq.Add(1))
	_, err = env.c.SetSecret(c, name, one)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteSecret(context.Background(), name) })
	_, err = env.c.BindSecret(c, name, types.SecretBinding{Host: "api.rotate.test", Header: "X-Api-Key", Format: "{{value}}"})
	require.NoError(t, err)
	// seen sends requests until one carries want (10 s at most).
	seen := func(want, what string) {
		t.Helper()
		start := time.Now()
		for n := 1; ; n++ {
			got := get()
			if got == want {
				t.Logf("%s: seen by request %d, after %v", what, n, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Since(start) > 10*time.Second {
				assert.Equal(t, want, got, "%s: not applied after %d requests", what, n)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	seen(one, "the bound secret, set on node A, sent by node B's proxy")
	assert.Equal(t, one, get(), "again, from node B's cache")

	_, err = env.c.SetSecret(c, name, two)
	require.NoError(t, err)
	seen(two, "a rotation on node A applies to node B")

	_, err = env.c.BindSecret(c, name, types.SecretBinding{Host: "api.rotate.test", Header: "X-Other", Format: "{{value}}"})
	require.NoError(t, err)
	seen("", "a binding moved to another header: X-Api-Key is no longer sent")

	_, err = env.c.DeleteSecret(c, name)
	require.NoError(t, err)
	seen("", "a revocation on node A applies to node B")
}
