package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// The node's registry refuses anyone on the host without a credential, the
// node credential cannot delete or list, and yet a save, a lazy restore
// through the stargz snapshotter and a GC that deletes manifests all work.
// The credentials sit in 0600 files and reach no instance.
func TestRootHostileRegistry(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "hostreg")
	a := up(t, p, 0)
	mustSh(t, a.ID, "head -c 1048576 /dev/urandom > /a")
	_, v2 := save(t, a.ID, "branch a")
	require.True(t, v2.Current)
	img, layer := topLayer(t, p, v2.Version)

	// Lazy restore: the snapshotter mounts the saved layer from the
	// registry, which it can only do with the node credential.
	sum := mustSh(t, a.ID, "sha256sum /a | cut -d' ' -f1")
	lz := up(t, p, v2.Version)
	assert.Equal(t, stargz.Name, containerSnapshotter(t, lz.ID))
	lazyLayer(t, stargzRoot(), layer) // fails the test when not mounted lazily
	assert.Equal(t, sum, mustSh(t, lz.ID, "sha256sum /a | cut -d' ' -f1"), "read through the lazy mount")

	base := "http://" + env.node.RegistryAddr()
	manifest := base + "/v2/" + img.Repo + "/manifests/" + img.Digest
	blob := base + "/v2/" + img.Repo + "/blobs/" + layer
	nodeCred := nodeCredential(t, env.node)
	_, gcFile := env.node.RegistryCredentialFiles()
	gcCred, err := registry.ReadCredentialFile(gcFile)
	require.NoError(t, err)

	t.Run("the host without a credential is refused", func(t *testing.T) {
		for _, rq := range []struct{ method, url string }{
			{http.MethodGet, base + "/v2/_catalog"},
			{http.MethodGet, manifest},
			{http.MethodHead, manifest},
			{http.MethodGet, blob},
			{http.MethodDelete, manifest},
			{http.MethodDelete, blob},
			{http.MethodPost, base + "/v2/" + img.Repo + "/blobs/uploads/"},
		} {
			assert.Equal(t, http.StatusUnauthorized, status(t, rq.method, rq.url, nil), "%s %s", rq.method, rq.url)
		}
		wrong := registry.Credential{User: nodeCred.User, Password: "guess"}
		assert.Equal(t, http.StatusUnauthorized, status(t, http.MethodGet, manifest, &wrong))
	})
	t.Run("the node credential neither lists nor deletes", func(t *testing.T) {
		assert.Equal(t, http.StatusNotFound, status(t, http.MethodGet, base+"/v2/_catalog", &nodeCred))
		assert.Equal(t, http.StatusForbidden, status(t, http.MethodDelete, manifest, &nodeCred))
		assert.Equal(t, http.StatusOK, status(t, http.MethodGet, manifest, &nodeCred))
	})

	// A GC deletes the manifest of an abandoned version (with the GC
	// credential; the host's DELETE above changed nothing).
	b := up(t, p, 1)
	mustSh(t, b.ID, "echo b > /b")
	_, v3 := save(t, b.ID, "branch b")
	require.True(t, v3.Conflict)
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	_, err = env.c.SetCurrent(c, p, types.SetCurrentRequest{Version: v3.Version, ExpectedCurrent: &proj.Current})
	require.NoError(t, err)
	for _, id := range []string{a.ID, lz.ID} {
		_, err = env.c.DeleteInstance(c, id)
		require.NoError(t, err)
	}
	_, err = env.c.SetRetention(c, p, types.Retention{KeepLast: 1})
	require.NoError(t, err)
	res := runGC(t, false)
	assert.Contains(t, collected(res, p), v2.Version)
	assert.True(t, res.Swept, res.Note)
	_, err = env.node.RegistryClient().Get(c, img.Ref())
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the GC deleted the manifest")
	assert.Equal(t, http.StatusNotFound, status(t, http.MethodGet, manifest, &gcCred))

	t.Run("a joining node without the credential is refused at start", func(t *testing.T) {
		for name, file := range map[string]string{"none": "", "wrong": writeCredential(t, registry.Credential{User: nodeCred.User, Password: "guess"})} {
			_, err := node.Start(c, node.Config{DataDir: filepath.Join(t.TempDir(), "data"), DSN: env.node.DSN(),
				Registry: env.node.RegistryAddr(), RegistryCredentialFile: file})
			assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, name)
		}
	})

	t.Run("files with addresses or credentials are 0600", func(t *testing.T) {
		files := []string{"admin.token", "envd.url", "registry.addr", "registry-node.credential",
			"registry-gc.credential", "stargz/registry.credentials"}
		if _, err := os.Stat(filepath.Join(env.dataDir, "parts.json")); err == nil {
			files = append(files, "parts.json")
		}
		for _, f := range files {
			st, err := os.Stat(filepath.Join(env.dataDir, f))
			if assert.NoError(t, err) {
				assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
			}
		}
	})

	t.Run("credentials reach no instance nor the snapshotter's command line", func(t *testing.T) {
		secrets := map[string]string{"node password": nodeCred.Password, "gc password": gcCred.Password, "admin token": env.node.Token}
		in := up(t, p, 0)
		// Everything an instance can read of its own set-up: init's
		// environment and command line, an exec's environment, every file
		// under /etc and /run.
		seen := mustSh(t, in.ID, `cat /proc/1/environ /proc/1/cmdline; echo; env; `+
			`find /etc /run -type f 2>/dev/null | while read -r f; do cat "$f" 2>/dev/null; done`)
		require.Contains(t, seen, "PATH=", "the probe read the environment")
		for what, s := range secrets {
			assert.NotContains(t, seen, s, "%s visible inside the instance", what)
		}

		// Nor in the container's record: its spec (env, args, mounts) and labels.
		cl := env.node.Runtime().Client()
		nctx := namespaces.WithNamespace(c, "envd")
		ctr, err := cl.LoadContainer(nctx, in.ID)
		require.NoError(t, err)
		info, err := ctr.Info(nctx)
		require.NoError(t, err)
		record := string(info.Spec.GetValue())
		for k, v := range info.Labels {
			record += k + "=" + v + "\n"
		}
		require.Contains(t, record, "PATH=")
		for what, s := range secrets {
			assert.NotContains(t, record, s, "%s in the container spec or labels", what)
		}

		pid, err := os.ReadFile(filepath.Join(env.dataDir, "stargz", "snapshotter.pid"))
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
		require.NoError(t, err)
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(n), f))
			require.NoError(t, err)
			for what, s := range secrets {
				assert.NotContains(t, string(b), s, "%s in the snapshotter's %s", what, f)
			}
		}
	})
}

// writeCredential writes cr to a new 0600 credential file.
func writeCredential(t *testing.T, cr registry.Credential) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "cred")
	require.NoError(t, registry.WriteCredentialFile(f, cr))
	return f
}

// status sends one request from the host, with cred by HTTP Basic unless
// nil, without following redirects, and returns the status.
func status(t *testing.T, method, url string, cred *registry.Credential) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, url, nil)
	require.NoError(t, err)
	if cred != nil {
		req.SetBasicAuth(cred.User, cred.Password)
	}
	// distribution answers 404 for an OCI manifest to a client that does
	// not accept it.
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
