package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/s3test"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// With the registry's storage on S3, distribution answers blob GETs with a
// redirect to the object; full and lazy pulls follow it with the Range kept,
// so a lazy restore works against an S3-backed registry.
func TestRootLazyRestoreFromS3BackedRegistry(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	s3 := s3test.Start(t)
	// Node A runs the embedded registry on S3 (as `envd serve
	// --registry-s3-endpoint` does); node B uses it as its external registry.
	// A database of their own: nodes of the shared database with another
	// registry could be picked by the shared node's placement, and pull
	// its images from the wrong registry.
	dsn := clusterDatabase(t)
	a, ca := startJoiningNode(t, "node-s3a", &node.Config{DSN: dsn, Registry: "-", DefaultTTL: time.Hour, PrefetchWindow: -1,
		RegistryS3: &registry.S3Storage{Endpoint: s3.Endpoint, Bucket: "registry", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}})
	aCred, _ := a.RegistryCredentialFiles()
	joining := &node.Config{DSN: dsn, Registry: a.RegistryAddr(), RegistryCredentialFile: aCred, DefaultTTL: time.Hour, PrefetchWindow: -1}
	require.Equal(t, stargz.Name, a.Runtime().LazySnapshotter())
	_, err := ca.ImportImage(c, "fixture-s3", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	p := fmt.Sprintf("s3reg-%d", projectSeq.Add(1))
	_, err = ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: "fixture-s3"})
	require.NoError(t, err)
	in, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := ca.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "head -c 31457280 /dev/urandom > /big30 && sha256sum /big30"}})
	require.NoError(t, err)
	if res.ExitCode != 0 {
		got, gerr := ca.GetInstance(c, in.ID)
		logTail(t, filepath.Join(a.DataDir(), "stargz", "snapshotter.log"), 80)
		t.Fatalf("exit %d, stderr %q; the instance now: %+v (%v)", res.ExitCode, res.Stderr, got, gerr)
	}
	sum := strings.Fields(res.Stdout)[0]
	op, err := ca.Save(c, in.ID, types.SaveRequest{Message: "on s3"}, "")
	require.NoError(t, err)
	done, err := ca.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)

	// The registry redirects a blob GET to S3, and a ranged GET through the
	// redirect answers 206 with the range.
	v, err := ca.GetVersion(c, p, 2)
	require.NoError(t, err)
	img, err := a.RegistryClient().Get(c, v.Image)
	require.NoError(t, err)
	top := img.Layers[len(img.Layers)-1]
	url := fmt.Sprintf("http://%s/v2/%s/blobs/%s", a.RegistryAddr(), img.Repo, top.Digest)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	authReq, err := http.NewRequestWithContext(c, http.MethodGet, url, nil)
	require.NoError(t, err)
	setNodeAuth(t, authReq, a)
	resp, err := noFollow.Do(authReq)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "distribution redirects blob GETs to S3")
	assert.Contains(t, resp.Header.Get("Location"), s3.Endpoint)
	req, err := http.NewRequestWithContext(c, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Range", "bytes=10-1033")
	setNodeAuth(t, req, a)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Len(t, body, 1024)

	// A second node restores the version lazily through the redirect.
	b, cb := startJoiningNode(t, "node-s3b", joining)
	require.Equal(t, stargz.Name, b.Runtime().LazySnapshotter())
	in2, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{Version: 2})
	require.NoError(t, err)
	res, err = cb.Exec(c, in2.ID, types.ExecRequest{Args: []string{"sha256sum", "/big30"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Equal(t, sum, strings.Fields(res.Stdout)[0])
}
