package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// dockerfileSteps is a multi-stage Dockerfile of ten steps: a build stage
// that makes a program (a script: the fixture base has no compiler) with a
// cache mount, and a final stage that copies it in. lastRun is the last
// step's command.
func dockerfileSteps(lastRun string) string {
	return `# a multi-stage build
FROM fixture AS build
ARG GREETING=hello
WORKDIR /src
COPY greet.sh /src/greet.sh
RUN echo "step one ran" > /src/one
RUN --mount=type=cache,target=/cache echo run >> /cache/runs && wc -l < /cache/runs | tr -d ' ' > /src/cache-runs
RUN sed "s/GREETING/${GREETING}/" /src/greet.sh > /src/hello && chmod 755 /src/hello

FROM fixture
COPY --from=build /src/hello /usr/local/bin/hello
COPY --from=build /src/cache-runs /etc/cache-runs
ENV HELLO_FROM=dockerfile
RUN ` + lastRun + "\n"
}

// dockerContext is the build context: greet.sh.
func dockerContext(t *testing.T, p string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := "#!/bin/sh\necho \"GREETING from $HELLO_FROM\"\n"
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "greet.sh", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte(body))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	bc, err := env.c.UploadBuildContext(ctx(t), p, &buf)
	require.NoError(t, err)
	return bc.Context
}

// buildWithLog runs a build (a Dockerfile or envd's own spec) to its
// end and answers the operation and its log as streamed.
func buildWithLog(t *testing.T, p string, req types.BuildRequest) (types.Operation, string) {
	t.Helper()
	c := ctx(t)
	op, err := env.c.Build(c, p, req)
	require.NoError(t, err)
	var mu sync.Mutex
	var streamed []string
	done, err := env.c.WaitOperation(c, op.ID, func(ev types.Event) {
		if ev.Type == "log" {
			mu.Lock()
			streamed = append(streamed, strings.Split(ev.Message, "\n")...)
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	return done, strings.Join(streamed, "\n")
}

// buildkitStep is a line of BuildKit's plain progress naming a step:
// "#7 [build 5/6] RUN echo ...".
var buildkitStep = regexp.MustCompile(`(?m)^#(\d+) \[([^\]]+)\] (.*)$`)

// cachedSteps maps each Dockerfile step of a BuildKit log ("RUN echo ...",
// "COPY --from=build ...") to whether BuildKit's cache served it (its
// vertex has a "#N CACHED" line).
func cachedSteps(t *testing.T, log string) map[string]bool {
	t.Helper()
	steps := map[string]bool{}
	for _, m := range buildkitStep.FindAllStringSubmatch(log, -1) {
		instr := strings.Fields(m[3])[0]
		if instr != "RUN" && instr != "COPY" && instr != "WORKDIR" {
			continue
		}
		steps[m[3]] = steps[m[3]] || regexp.MustCompile(`(?m)^#`+m[1]+` CACHED$`).MatchString(log)
	}
	require.NotEmpty(t, steps, "no steps in the build log:\n%s", log)
	return steps
}

func buildResult(t *testing.T, op types.Operation, log string) types.BuildResult {
	t.Helper()
	require.Equalf(t, types.OpSucceeded, op.State, "%+v\nlog:\n%s", op.Error, log)
	var res types.BuildResult
	require.NoError(t, json.Unmarshal(op.Result, &res))
	return res
}

// A multi-stage Dockerfile with a cache mount builds through BuildKit into
// a version of kind build whose layers are eStargz; an instance of it runs
// the built program. The unchanged Dockerfile again is served by BuildKit's
// cache (every step CACHED) and reuses the version; a change of its last
// line runs only that step; a build argument reruns the cache-mount step,
// which finds the cache of the first build.
func TestRootDockerfileBuildCachesAndRuns(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "dockerfile")
	bctx := dockerContext(t, p)
	req := types.BuildRequest{Context: bctx, Dockerfile: &types.DockerfileBuild{Content: dockerfileSteps(`echo "built one" > /etc/built`)}}

	op, log := buildWithLog(t, p, req)
	first := buildResult(t, op, log)
	assert.False(t, first.Cached)
	for step, cached := range cachedSteps(t, log) {
		assert.False(t, cached, "the first build runs %q", step)
	}
	v, err := env.c.GetVersion(c, p, first.Version)
	require.NoError(t, err)
	assert.Equal(t, "build", v.Kind)
	img, err := env.node.RegistryClient().Get(c, v.Image)
	require.NoError(t, err)
	for _, l := range img.Layers {
		assert.NotEmpty(t, l.Annotations["containerd.io/snapshot/stargz/toc.digest"], "layer %s is eStargz", l.Digest)
	}
	var kept bytes.Buffer
	_, err = env.c.OperationLogs(c, op.ID, &kept)
	require.NoError(t, err)
	assert.Contains(t, kept.String(), "RUN echo \"step one ran\"", "BuildKit's progress is the build's kept log")

	in := up(t, p, first.Version)
	assert.Equal(t, "hello from dockerfile", mustSh(t, in.ID, "hello"), "the built program, with the image's ENV")
	assert.Equal(t, "built one", mustSh(t, in.ID, "cat /etc/built"))
	assert.Equal(t, "1", mustSh(t, in.ID, "cat /etc/cache-runs"))

	// Unchanged: every step from BuildKit's cache, the same version.
	op, log = buildWithLog(t, p, req)
	again := buildResult(t, op, log)
	for step, cached := range cachedSteps(t, log) {
		assert.True(t, cached, "an unchanged build takes %q from the cache", step)
	}
	assert.True(t, again.Cached)
	assert.Equal(t, first.Version, again.Version)

	// The last line changed: only it runs.
	changed := req
	changed.Dockerfile = &types.DockerfileBuild{Content: dockerfileSteps(`echo "built two" > /etc/built`)}
	op, log = buildWithLog(t, p, changed)
	second := buildResult(t, op, log)
	ran := []string{}
	for step, cached := range cachedSteps(t, log) {
		if !cached {
			ran = append(ran, step)
		}
	}
	assert.Equal(t, []string{`RUN echo "built two" > /etc/built`}, ran, "only the changed step runs")
	assert.NotEqual(t, first.Version, second.Version)
	in2 := up(t, p, second.Version)
	assert.Equal(t, "built two", mustSh(t, in2.ID, "cat /etc/built"))
	assert.Equal(t, "hello from dockerfile", mustSh(t, in2.ID, "hello"))

	// A build argument reruns the build stage; its cache mount kept the
	// first build's run.
	withArg := changed
	withArg.Dockerfile = &types.DockerfileBuild{Content: changed.Dockerfile.Content, Args: map[string]string{"GREETING": "hi"}}
	op, log = buildWithLog(t, p, withArg)
	third := buildResult(t, op, log)
	in3 := up(t, p, third.Version)
	assert.Equal(t, "hi from dockerfile", mustSh(t, in3.ID, "hello"))
	assert.Equal(t, "2", mustSh(t, in3.ID, "cat /etc/cache-runs"), "the cache mount outlived the first build")

	// --target builds the named stage.
	staged := req
	staged.Dockerfile = &types.DockerfileBuild{Content: req.Dockerfile.Content, Target: "build"}
	op, log = buildWithLog(t, p, staged)
	fourth := buildResult(t, op, log)
	in4 := up(t, p, fourth.Version)
	assert.Equal(t, "step one ran", mustSh(t, in4.ID, "cat /src/one"))
	assert.Equal(t, "", mustSh(t, in4.ID, "ls /usr/local/bin/hello 2>/dev/null; true"), "the final stage was not built")
}

// A Dockerfile that cannot build is refused with invalid_argument before
// any operation (an unknown instruction, an image not imported here, a
// target no stage has, a Dockerfile mixed with envd's spec), and one whose
// step fails ends its operation failed_precondition with the step's
// output in the build's log; the project keeps its versions.
func TestRootDockerfileBuildRefusesBadDockerfiles(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "dockerfile-bad")
	for name, req := range map[string]types.BuildRequest{
		"unknown instruction": {Dockerfile: &types.DockerfileBuild{Content: "FROM fixture\nRUNN echo hi\n"}},
		"no FROM":             {Dockerfile: &types.DockerfileBuild{Content: "RUN echo hi\n"}},
		"outside image":       {Dockerfile: &types.DockerfileBuild{Content: "FROM docker.io/library/alpine:3\nRUN echo hi\n"}},
		"COPY from outside":   {Dockerfile: &types.DockerfileBuild{Content: "FROM fixture\nCOPY --from=nginx:1 /etc/nginx /etc/nginx\n"}},
		"no such target":      {Dockerfile: &types.DockerfileBuild{Content: "FROM fixture AS a\nRUN true\n", Target: "b"}},
		"mixed with a spec":   {Manager: "apt", Packages: []string{"tree"}, Dockerfile: &types.DockerfileBuild{Content: "FROM fixture\n"}},
		"empty":               {Dockerfile: &types.DockerfileBuild{Content: " \n"}},
	} {
		_, err := env.c.Build(c, p, req)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
	}

	op, log := buildWithLog(t, p, types.BuildRequest{Dockerfile: &types.DockerfileBuild{
		Content: "FROM fixture\nRUN echo about to fail && exit 3\nRUN echo never\n"}})
	require.Equal(t, types.OpFailed, op.State, "log:\n%s", log)
	require.NotNil(t, op.Error)
	assert.Equal(t, "failed_precondition", op.Error.Code)
	assert.Contains(t, op.Error.Message, "exit code: 3", "the message says why")
	assert.Contains(t, log, "about to fail", "the failing step's output is in the log")
	var kept bytes.Buffer
	_, err := env.c.OperationLogs(c, op.ID, &kept)
	require.NoError(t, err)
	assert.Contains(t, kept.String(), "about to fail")
	vs, err := env.c.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 1, "a failed build makes no version")
}

// hostAddr is a non-loopback IPv4 address of this machine (the node's
// address as other machines see it).
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address on this machine")
	return ""
}

// A Dockerfile's RUN steps have an instance's network, and an instance's
// limits: they get an address on the bridge, but neither the node's API
// (on loopback) nor the node's own address reach anything, nor does the
// registry (the cluster's endpoint).
func TestRootDockerfileRunStepsCannotReachTheNode(t *testing.T) {
	t.Parallel()
	p := newProject(t, "dockerfile-net")
	_, regPort, err := net.SplitHostPort(env.node.RegistryClient().Addr())
	require.NoError(t, err)
	api, err := url.Parse(env.node.URL)
	require.NoError(t, err)
	// A service on every address of the node: were the node's address
	// reachable from a RUN step, the step would connect here.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	defer l.Close()
	var reached atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	host := hostAddr(t)
	try := func(addr, port string) string {
		return `if nc -w 3 ` + addr + ` ` + port + ` </dev/null; then echo "CONN""ECTED to ` + addr + `:` + port + `"; exit 1; fi; echo "no connection to ` + addr + `:` + port + `"` + "\n"
	}
	op, log := buildWithLog(t, p, types.BuildRequest{Dockerfile: &types.DockerfileBuild{Content: "FROM fixture\n" +
		"RUN ip -4 addr show eth0 | grep -q 'inet ' && echo \"RUN has eth0\"\n" +
		"RUN " + try(api.Hostname(), api.Port()) +
		"RUN " + try(host, api.Port()) +
		"RUN " + try(host, port) +
		"RUN " + try(host, regPort)}})
	buildResult(t, op, log)
	assert.NotContains(t, log, "CONNECTED")
	assert.Contains(t, log, "RUN has eth0", "the steps are on a network")
	for _, addr := range []string{api.Host, net.JoinHostPort(host, api.Port()), net.JoinHostPort(host, port), net.JoinHostPort(host, regPort)} {
		assert.Contains(t, log, "no connection to "+addr)
	}
	assert.Zero(t, reached.Load(), "nothing from the build reached the node's address")
}

// The Debian base's apt sources (debootstrap from the machine's mirror)
// are reachable from RUN steps under the project's egress policy: a
// Dockerfile installs a package and an instance of the result runs it. A
// project whose policy does not allow the mirror gets a failed build, the
// reason in its log.
func TestRootDockerfileRunInstallsPackages(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDebian(t)
	const dockerfile = "FROM debian\n" +
		"RUN apt-get -o Acquire::Retries=3 update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tree\n"

	p := fmt.Sprintf("dockerfile-apt-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base})
	require.NoError(t, err)
	op, log := buildWithLog(t, p, types.BuildRequest{Switch: true, Dockerfile: &types.DockerfileBuild{Content: dockerfile}})
	res := buildResult(t, op, log)
	require.True(t, res.Current)
	in := up(t, p, 0)
	assert.Contains(t, mustSh(t, in.ID, "tree --version"), "tree v")
	assert.Equal(t, "/usr/bin/tree", mustSh(t, in.ID, "command -v tree"))

	// The same Dockerfile in a project that allows only another address:
	// the name resolves, the connection to the mirror is refused. BuildKit's
	// cache does not serve it the step the open project ran (RUN steps'
	// host name, part of their cache key, names the policy).
	denied := fmt.Sprintf("dockerfile-apt-denied-%d", projectSeq.Add(1))
	_, err = env.c.CreateProject(c, types.CreateProjectRequest{Name: denied, Base: base})
	require.NoError(t, err)
	_, err = env.c.SetProjectNetwork(c, denied, types.ProjectNetwork{Egress: "allow:192.0.2.1"})
	require.NoError(t, err)
	op, log = buildWithLog(t, denied, types.BuildRequest{Switch: true, Dockerfile: &types.DockerfileBuild{
		Content: dockerfile}})
	require.Equal(t, types.OpFailed, op.State, "log:\n%s", log)
	require.NotNil(t, op.Error)
	assert.Contains(t, op.Error.Message, "apt-get")
	assert.Regexp(t, `(?i)(unable to connect|could not connect|connection failed|failed to fetch)`, log, "apt says it could not reach the mirror")
	vs, err := env.c.ListVersions(c, denied)
	require.NoError(t, err)
	assert.Len(t, vs, 1, "a failed build makes no version")
}

// A migration in mode rebuild of a Dockerfile version builds the kept
// Dockerfile and build context again with its final stage FROM the new
// base: the result has the new base's files and still the built ones, and
// keeps that Dockerfile as its spec (so it can be rebuilt again). A
// Dockerfile whose final stage is FROM scratch has no base to replace.
func TestRootDockerfileVersionRebuiltByMigrate(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "dockerfile-migrate")
	bc := dockerContext(t, p)
	op, log := buildWithLog(t, p, types.BuildRequest{Switch: true, Context: bc, Dockerfile: &types.DockerfileBuild{
		Content: "FROM fixture AS tools\nRUN echo tool > /tool\n" +
			"FROM fixture\nCOPY greet.sh /usr/local/bin/greet\nCOPY --from=tools /tool /etc/tool\nRUN echo built > /etc/built\n"}})
	res := buildResult(t, op, log)
	require.True(t, res.Current)
	// Another base: the fixture with one more file.
	var other bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(env.fixtureTar)), tar.NewWriter(&other)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.NoError(t, tw.WriteHeader(hdr))
		_, err = io.Copy(tw, tr)
		require.NoError(t, err)
	}
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "./etc/other-base", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte("b2\n"))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	base := p + "-base"
	_, err = env.c.ImportImage(c, base, &other)
	require.NoError(t, err)

	mop, err := env.c.Migrate(c, p, types.MigrateRequest{Base: base, Mode: types.MigrateRebuild, Switch: true,
		Validate: [][]string{{"test", "-e", "/etc/other-base"}}})
	require.NoError(t, err)
	mop, err = env.c.WaitOperation(c, mop.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, mop.State, "%+v", mop.Error)
	var mres types.MigrateResult
	require.NoError(t, json.Unmarshal(mop.Result, &mres))
	assert.Equal(t, types.MigrateRebuild, mres.Mode)
	assert.True(t, mres.Current)
	assert.Equal(t, 1, mres.Validated)
	v, err := env.c.GetVersion(c, p, mres.Version)
	require.NoError(t, err)
	assert.Equal(t, "build", v.Kind)

	in := up(t, p, 0)
	assert.Equal(t, "b2", mustSh(t, in.ID, "cat /etc/other-base"), "the new base")
	assert.Equal(t, "built", mustSh(t, in.ID, "cat /etc/built"), "the RUN step")
	assert.Equal(t, "tool", mustSh(t, in.ID, "cat /etc/tool"), "the other stage")
	assert.Contains(t, mustSh(t, in.ID, "cat /usr/local/bin/greet"), "GREETING", "the kept build context")

	spec, err := env.c.VersionSpec(c, p, mres.Version)
	require.NoError(t, err)
	require.NotNil(t, spec.Spec.Dockerfile)
	assert.Equal(t, "FROM fixture AS tools\nRUN echo tool > /tool\nFROM "+base+"\nCOPY greet.sh /usr/local/bin/greet\nCOPY --from=tools /tool /etc/tool\nRUN echo built > /etc/built\n",
		spec.Spec.Dockerfile.Content, "only the final stage's FROM names the new base")

	// FROM scratch: refused when asked, saying why.
	scratch := newProject(t, "dockerfile-migrate-scratch")
	op, log = buildWithLog(t, scratch, types.BuildRequest{Switch: true, Dockerfile: &types.DockerfileBuild{
		Content: "FROM fixture AS b\nRUN echo x > /x\nFROM scratch\nCOPY --from=b /x /x\n"}})
	buildResult(t, op, log)
	_, err = env.c.Migrate(c, scratch, types.MigrateRequest{Base: base, Mode: types.MigrateRebuild})
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), "scratch")
}
