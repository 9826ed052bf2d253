package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// debianRootfs is where the Debian base of the build tests is kept between
// runs (debootstrap from the machine's Debian mirror: this test needs the
// network, as a build does).
const debianRootfs = "/var/tmp/envd-e2e/rootfs-debian"

var debianOnce struct {
	sync.Once
	err error
}

// importDebian imports a Debian bookworm minbase as base image "debian",
// once per test process.
func importDebian(t *testing.T) string {
	t.Helper()
	const name = "debian"
	debianOnce.Do(func() {
		// A mirror hiccup should not fail the suite: try three times
		// (debootstrap starts over in a fresh directory).
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			var out []byte
			if out, err = exec.Command("bash", "../scripts/debian-rootfs.sh", debianRootfs).CombinedOutput(); err == nil {
				break
			}
			err = fmt.Errorf("debian-rootfs.sh: %v: %s", err, out)
			_ = os.RemoveAll(debianRootfs)
		}
		if err != nil {
			debianOnce.err = err
			return
		}
		tarCmd := exec.Command("tar", "-C", debianRootfs, "-cf", "-", ".")
		r, err := tarCmd.StdoutPipe()
		if err != nil {
			debianOnce.err = err
			return
		}
		if err := tarCmd.Start(); err != nil {
			debianOnce.err = err
			return
		}
		_, err = env.c.ImportImage(ctx(t), name, r)
		if werr := tarCmd.Wait(); err == nil {
			err = werr
		}
		debianOnce.err = err
	})
	require.NoError(t, debianOnce.err)
	return name
}

// A build installs declared packages in a build container, saves them as a
// version of kind build, validates it in a trial instance and switches to
// it; the same spec again reuses it; a failed install or validation leaves
// current alone; package names with shell characters are refused at once.
func TestRootBuildFromDeclaredPackages(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDebian(t)
	p := fmt.Sprintf("build-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base})
	require.NoError(t, err)

	req := types.BuildRequest{Manager: "apt", Packages: []string{"tree"}, Validate: [][]string{{"tree", "--version"}}, Switch: true}
	res := runBuild(t, p, req)
	assert.Equal(t, 2, res.Version)
	assert.True(t, res.Current)
	assert.False(t, res.Cached)
	assert.Equal(t, 1, res.Validated)
	v, err := env.c.GetVersion(c, p, 2)
	require.NoError(t, err)
	assert.Equal(t, "build", v.Kind)

	// What the build changed: the package first, then its files.
	ch, err := env.c.VersionChanges(c, p, 2, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, ch.Against, "against the parent")
	require.NotNil(t, ch.Packages, "the build changed dpkg's status")
	assert.Equal(t, "dpkg", ch.Packages.Manager)
	var added []string
	for _, pk := range ch.Packages.Added {
		added = append(added, pk.Name)
		assert.NotEmpty(t, pk.Version, pk.Name)
	}
	assert.Contains(t, added, "tree")
	assert.Empty(t, ch.Packages.Removed)
	var files []string
	for _, fc := range ch.Added {
		files = append(files, fc.Path)
	}
	assert.Contains(t, files, "/usr/bin/tree")
	var summarised []string
	for _, s := range ch.Summarized {
		summarised = append(summarised, s.Path)
	}
	assert.Contains(t, summarised, "/var/lib/dpkg", "dpkg's bookkeeping is summarised, not listed")

	in := up(t, p, 0)
	assert.Contains(t, mustSh(t, in.ID, "tree --version"), "tree v")
	list, err := env.c.ListInstances(c, p)
	require.NoError(t, err)
	for _, x := range list {
		if x.ID != in.ID {
			assert.Equal(t, types.StateTerminated, x.State, "build and trial containers are removed: %s", x.ID)
			assert.Equal(t, types.ReasonBuildFinished, x.Reason)
		}
	}

	again := runBuild(t, p, types.BuildRequest{Manager: "apt", Packages: []string{"tree", "tree"}, Validate: req.Validate})
	assert.True(t, again.Cached, "the same base and normalized spec reuse the build")
	assert.Equal(t, 2, again.Version)

	// A validation that fails marks the new version failed; current stays.
	op, err := env.c.Build(c, p, types.BuildRequest{Manager: "apt", Packages: []string{"tree"}, Validate: [][]string{{"false"}}, Switch: true})
	require.NoError(t, err)
	done, err := env.c.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpFailed, done.State)
	v3, err := env.c.GetVersion(c, p, 3)
	require.NoError(t, err)
	assert.Equal(t, "failed", v3.State)

	// An install that fails makes no version and says why.
	op, err = env.c.Build(c, p, types.BuildRequest{Manager: "apt", Packages: []string{"no-such-package-envd"}})
	require.NoError(t, err)
	done, err = env.c.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpFailed, done.State)
	require.NotNil(t, done.Error)
	assert.Contains(t, done.Error.Message, "Unable to locate package no-such-package-envd")
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.Equal(t, 2, proj.Current, "failures leave current alone")
	vs, err := env.c.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 3, "the failed install made no version")

	for _, bad := range []string{"tree; id", "$(reboot)", "--allow-unauthenticated", "tree=1.0 && id"} {
		_, err = env.c.Build(c, p, types.BuildRequest{Manager: "apt", Packages: []string{bad}})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%q", bad)
	}
}

func runBuild(t *testing.T, p string, req types.BuildRequest) types.BuildResult {
	t.Helper()
	op, err := env.c.Build(ctx(t), p, req)
	res := succeeded[types.BuildResult](t, op, err)
	require.True(t, strings.HasPrefix(res.Key, "sha256:"))
	return res
}
