package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// Two nodes share one PostgreSQL database and one registry (node A's
// embedded one, which both sweep): raceSavesWithGCs. The cluster test runs
// the same race on a registry on S3
// (TestRootClusterPlacementDrainAndNodeLoss). The two nodes are a cluster
// of their own (clusterDatabase), so that their GCs sweep no other test's
// content and the test runs beside the others.
func TestRootGCTwoNodesRaceSaves(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	dsn := clusterDatabase(t)
	a, ca := startJoiningNode(t, "node-gc-a", &node.Config{DSN: dsn, Registry: "-", DefaultTTL: time.Hour, PrefetchWindow: -1})
	// Both nodes run GCs, so both hold the GC's registry credential (a
	// joined node without it cannot delete manifests: docs/api.md).
	cred, gcCred := a.RegistryCredentialFiles()
	b, cb := startJoiningNode(t, "node-gc-b", &node.Config{DSN: dsn, Registry: a.RegistryAddr(), RegistryCredentialFile: cred,
		RegistryGCCredentialFile: gcCred, DefaultTTL: time.Hour, PrefetchWindow: -1})
	_, err := ca.ImportImage(c, fixtureBase, bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	p := fmt.Sprintf("gcrace-%d", projectSeq.Add(1))
	_, err = ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	raceSavesWithGCs(t, p, a.RegistryClient(), raceNode{a.Name(), ca, nil}, raceNode{b.Name(), cb, nil})
}

type raceNode struct {
	name string
	c    *client.Client
	sel  map[string]string // the node_selector that places on it, if it spreads
}

// raceSavesWithGCs races saves of an instance of project p on each node
// against GCs run over and over on each; afterwards every committed
// version pulls whole from reg and restores, with its files, on every
// node: no sweep deleted content a node had uploaded and not yet
// committed.
func raceSavesWithGCs(t *testing.T, p string, reg *registry.Client, nodes ...raceNode) {
	t.Helper()
	c := ctx(t)
	type saved struct {
		version int
		files   map[string]string // path -> md5
	}
	const saves = 3
	var (
		mu        sync.Mutex
		committed []saved
		wg        sync.WaitGroup
		done      = make(chan struct{})
		gcs       int
	)
	for _, n := range nodes {
		in, err := n.c.CreateInstance(c, p, types.CreateInstanceRequest{NodeSelector: n.sel})
		require.NoError(t, err)
		require.Equal(t, n.name, in.Node, "the race needs an instance on each node")
		t.Cleanup(func() { _, _ = n.c.DeleteInstance(context.Background(), in.ID) })
		wg.Go(func() {
			files := map[string]string{}
			for i := range saves {
				path := fmt.Sprintf("/race-%s-%d", in.ID, i)
				res, err := n.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c",
					fmt.Sprintf("head -c 4194304 /dev/urandom > %s && md5sum < %s", path, path)}})
				if !assert.NoError(t, err) || !assert.Equal(t, 0, res.ExitCode, res.Stderr) {
					return
				}
				files[path] = strings.Fields(res.Stdout)[0]
				op, err := n.c.Save(c, in.ID, types.SaveRequest{Message: path}, "")
				if !assert.NoError(t, err) {
					return
				}
				done, err := n.c.WaitOperation(c, op.ID, nil)
				if !assert.NoError(t, err) || !assert.Equalf(t, types.OpSucceeded, done.State, "save on %s: %+v", n.name, done.Error) {
					return
				}
				var r types.SaveResult
				if !assert.NoError(t, json.Unmarshal(done.Result, &r)) {
					return
				}
				mu.Lock()
				committed = append(committed, saved{r.Version, maps.Clone(files)})
				mu.Unlock()
			}
		})
	}
	var gcWG sync.WaitGroup
	for _, n := range nodes {
		gcWG.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				op, err := n.c.GC(c, types.GCRequest{})
				if !assert.NoError(t, err) {
					return
				}
				end, err := n.c.WaitOperation(c, op.ID, nil)
				if !assert.NoError(t, err) || !assert.Equalf(t, types.OpSucceeded, end.State, "gc on %s: %+v", n.name, end.Error) {
					return
				}
				mu.Lock()
				gcs++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(done)
	gcWG.Wait()
	require.Len(t, committed, len(nodes)*saves, "every save committed")
	t.Logf("%d saves raced %d GCs", len(committed), gcs)
	require.GreaterOrEqual(t, gcs, 2, "GCs ran while the saves did")

	for _, s := range committed {
		v, err := nodes[0].c.GetVersion(c, p, s.version)
		require.NoError(t, err)
		img, err := reg.Get(c, v.Image)
		require.NoError(t, err, "version %d's manifest", s.version)
		for i := range img.Layers {
			rc, err := reg.OpenLayer(c, img, i)
			require.NoError(t, err, "version %d layer %d", s.version, i)
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			require.NoError(t, err, "version %d layer %d pulls whole", s.version, i)
		}
		for _, n := range nodes {
			in, err := n.c.CreateInstance(c, p, types.CreateInstanceRequest{Version: s.version, NodeSelector: n.sel})
			require.NoError(t, err, "version %d on %s", s.version, n.name)
			for path, sum := range s.files {
				res, err := n.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "md5sum < " + path}})
				require.NoError(t, err)
				assert.Equalf(t, sum, strings.Fields(res.Stdout + " -")[0], "version %d on %s: %s (%s)", s.version, n.name, path, res.Stderr)
			}
			_, err = n.c.DeleteInstance(c, in.ID)
			require.NoError(t, err)
		}
	}
}

// The sweep's orphan scan deletes a manifest in a project repository that
// no version owns (as a crash between push and commit leaves), and its
// blobs; the project's committed versions stay.
func TestRootGCOrphanManifests(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "orphan")
	in := up(t, p, 0)
	mustSh(t, in.ID, "echo kept > /kept")
	_, s := save(t, in.ID, "owned")
	reg := env.node.RegistryClient()
	owned, err := reg.Get(c, s.Image)
	require.NoError(t, err)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "orphan"), []byte("no row owns me"), 0o644))
	orphan, err := reg.ImportRootfs(c, dir, owned.Repo, "")
	require.NoError(t, err)

	res := runGC(t, false)
	require.True(t, res.Swept, res.Note)
	assert.Contains(t, res.OrphanManifests, orphan.Ref())
	assert.NotContains(t, res.OrphanManifests, owned.Ref())
	_, err = reg.Get(c, orphan.Ref())
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the orphan manifest is deleted")
	assert.Equal(t, http.StatusNotFound, blobStatus(t, orphan.Repo, orphan.Layers[0].Digest), "and its layer swept")
	assert.NoError(t, reg.Verify(c, owned))
	d := up(t, p, s.Version)
	assert.Equal(t, "kept", mustSh(t, d.ID, "cat /kept"))
}
