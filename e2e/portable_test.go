package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// A version exported as an OCI image layout imports into a fresh
// installation (its own PostgreSQL, registry and containerd) as a base
// image whose eStargz layers restore lazily there, with the user's files.
func TestRootVersionExportImportsLazilyElsewhere(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "export")
	a := up(t, p, 0)
	sum := mustSh(t, a.ID, "mkdir -p /home/u && head -c 4194304 /dev/urandom > /home/u/data && echo hi > /home/u/note && sha256sum /home/u/data")
	_, saved := save(t, a.ID, "to take elsewhere")

	var layout bytes.Buffer
	n, err := env.c.ExportVersion(c, p, saved.Version, &layout)
	require.NoError(t, err)
	assert.Equal(t, int64(layout.Len()), n)
	names := tarNames(t, layout.Bytes())
	assert.Contains(t, names, "oci-layout")
	assert.Contains(t, names, "index.json")
	img, top := topLayer(t, p, saved.Version)
	for _, l := range img.Layers {
		assert.Contains(t, names, "blobs/sha256/"+l.Digest[len("sha256:"):], "every layer blob as stored")
	}

	// Errors before the stream starts are ordinary answers.
	_, err = env.c.ExportVersion(c, p, 99, io.Discard)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// A fresh installation on this machine.
	dir, err := os.MkdirTemp("", "envd-e2e-fresh-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user must reach its cluster dir
	fresh, err := node.Start(c, node.Config{DataDir: filepath.Join(dir, "data"), Node: "fresh", PrefetchWindow: -1, WrapAPI: env.spec.Wrap})
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fresh.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})
	fc, err := client.New(fresh.URL, fresh.Token)
	require.NoError(t, err)
	imported, err := fc.ImportImage(c, "moved", bytes.NewReader(layout.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, img.Digest, imported.Digest, "the manifest arrives as it was")
	_, err = fc.CreateProject(c, types.CreateProjectRequest{Name: "moved", Base: "moved"})
	require.NoError(t, err)
	in, err := fc.CreateInstance(c, "moved", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := fc.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "cat /home/u/note && sha256sum /home/u/data"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\n"+sum+"\n", res.Stdout)

	// Lazy: the fresh node's containerd mounted the top layer through the
	// stargz snapshotter without pulling its blob.
	cctx := namespaces.WithNamespace(c, "envd")
	ctr, err := fresh.Runtime().Client().LoadContainer(cctx, in.ID)
	require.NoError(t, err)
	info, err := ctr.Info(cctx)
	require.NoError(t, err)
	assert.Equal(t, stargz.Name, info.Snapshotter)
	_, err = fresh.Runtime().Client().ContentStore().Info(cctx, digest.Digest(top))
	assert.True(t, cerrdefs.IsNotFound(err), "the fresh node holds the layer's blob: the restore pulled it (err %v)", err)

	// A broken layout is a clear error.
	_, err = fc.ImportImage(c, "broken", bytes.NewReader(brokenLayout(t)))
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	// By reference from another registry (here the first installation's,
	// with its credential in the docker config the node reads).
	cred := nodeCredential(t, env.node)
	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(cred.User + ":" + cred.Password))
	require.NoError(t, os.WriteFile(filepath.Join(cfgDir, "config.json"),
		[]byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, env.node.RegistryAddr(), auth)), 0o600))
	t.Setenv("DOCKER_CONFIG", cfgDir)
	ref := env.node.RegistryAddr() + "/" + img.Repo + "@" + img.Digest
	pulled, err := fc.PullImage(c, "pulled", ref)
	require.NoError(t, err)
	assert.Equal(t, img.Digest, pulled.Digest)
	_, err = fc.PullImage(c, "nope", env.node.RegistryAddr()+"/envd/no-such-repo:latest")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// A docker save archive of the same image: its layers as they are.
	v1img, err := remote.Image(mustRef(t, ref), remote.WithAuth(&authn.Basic{Username: cred.User, Password: cred.Password}))
	require.NoError(t, err)
	tag, err := name.NewTag("example.test/moved:v1")
	require.NoError(t, err)
	var docker bytes.Buffer
	require.NoError(t, tarball.Write(tag, v1img, &docker))
	fromDocker, err := fc.ImportImage(c, "from-docker", &docker)
	require.NoError(t, err)
	_, err = fc.CreateProject(c, types.CreateProjectRequest{Name: "from-docker", Base: "from-docker"})
	require.NoError(t, err)
	in2, err := fc.CreateInstance(c, "from-docker", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err = fc.Exec(c, in2.ID, types.ExecRequest{Args: []string{"cat", "/home/u/note"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\n", res.Stdout)
	assert.NotEmpty(t, fromDocker.Digest)
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	require.NoError(t, err)
	return r
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, h.Name)
	}
}

// brokenLayout is an OCI layout whose index names a manifest it lacks.
func brokenLayout(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{
		"oci-layout": `{"imageLayoutVersion": "1.0.0"}`,
		"index.json": fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%064d","size":2}]}`, 0),
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}
