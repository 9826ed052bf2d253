package builder

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

func TestDockerfileImagesFindsWhatMustBeImported(t *testing.T) {
	df := `# syntax=docker/dockerfile:1
ARG BASE=fixture
ARG TAG
FROM ${BASE}:${TAG:-latest} AS build
RUN --mount=type=cache,target=/cache \
    --mount=type=bind,from=tools,source=/bin,target=/t \
    echo hi
COPY --from=build /a /b
RUN <<EOF
FROM not-an-instruction
EOF
FROM build AS again
COPY --from=0 /a /c
COPY --from=helper:2 /x /y
FROM scratch
COPY --from=again /a /a
`
	refs, err := DockerfileImages(df, map[string]string{"TAG": "v1"})
	require.NoError(t, err)
	assert.Equal(t, []string{"fixture:v1", "tools", "helper:2"}, refs.Images, "stages and scratch are not images")

	refs, err = DockerfileImages(df, nil)
	require.NoError(t, err)
	assert.Equal(t, "fixture:latest", refs.Images[0], "the ARG default")
	assert.Equal(t, "fixture", baseName(refs.Images[0]))
}

func TestCheckSpecRefusesBadDockerfiles(t *testing.T) {
	for name, req := range map[string]types.BuildRequest{
		"unknown instruction": {Dockerfile: &types.DockerfileBuild{Content: "FROM a\nRUNN x\n"}},
		"no FROM":             {Dockerfile: &types.DockerfileBuild{Content: "# just a comment\nRUN x\n"}},
		"FROM nothing":        {Dockerfile: &types.DockerfileBuild{Content: "FROM --platform=linux/amd64\n"}},
		"empty ARG in FROM":   {Dockerfile: &types.DockerfileBuild{Content: "ARG B\nFROM $B\n"}},
		"no such target":      {Dockerfile: &types.DockerfileBuild{Content: "FROM a AS one\n", Target: "two"}},
		"reserved arg":        {Dockerfile: &types.DockerfileBuild{Content: "FROM a\n", Args: map[string]string{"BUILDKIT_CACHE_MOUNT_NS": "x"}}},
		"bad arg name":        {Dockerfile: &types.DockerfileBuild{Content: "FROM a\n", Args: map[string]string{"A B": "x"}}},
		"with packages":       {Manager: "apt", Packages: []string{"tree"}, Dockerfile: &types.DockerfileBuild{Content: "FROM a\n"}},
		"with from":           {From: 2, Dockerfile: &types.DockerfileBuild{Content: "FROM a\n"}},
	} {
		err := CheckSpec(req)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
	}
	assert.NoError(t, CheckSpec(types.BuildRequest{Dockerfile: &types.DockerfileBuild{Content: "from a as One\nrun x\n", Target: "one"}}))
}

func TestReplaceFinalBase(t *testing.T) {
	df := "ARG BASE=fixture\n" +
		"FROM ${BASE} AS build\nRUN make\n" +
		"FROM fixture AS tools\n" +
		"FROM build AS final\nCOPY --from=tools /t /t\n"
	out, err := ReplaceFinalBase(df, nil, "", "fixture-v2")
	require.NoError(t, err)
	assert.Equal(t, "ARG BASE=fixture\nFROM fixture-v2 AS build\nRUN make\nFROM fixture AS tools\nFROM build AS final\nCOPY --from=tools /t /t\n", out,
		"the final stage descends from build: build's FROM is replaced, the tools stage keeps its image")
	refs, err := DockerfileImages(out, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"fixture-v2", "fixture"}, refs.Images)

	out, err = ReplaceFinalBase(df, nil, "tools", "other")
	require.NoError(t, err)
	assert.Contains(t, out, "FROM other AS tools\n")
	assert.Contains(t, out, "FROM ${BASE} AS build\n")

	out, err = ReplaceFinalBase("FROM --platform=linux/amd64 debian\r\nRUN x\r\n", nil, "", "debian-13")
	require.NoError(t, err)
	assert.Equal(t, "FROM --platform=linux/amd64 debian-13\nRUN x\n", out)

	_, err = ReplaceFinalBase("FROM a AS one\nFROM scratch\nCOPY --from=one /a /a\n", nil, "", "b")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = ReplaceFinalBase("FROM \\\n a\nRUN x\n", nil, "", "b")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = ReplaceFinalBase("FROM a\n", nil, "nope", "b")
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func TestSandboxHostnameIsReserved(t *testing.T) {
	// The RUN steps' host name names the build's network grant.
	err := CheckSpec(types.BuildRequest{Dockerfile: &types.DockerfileBuild{Content: "FROM a\n", Args: map[string]string{"BUILDKIT_SANDBOX_HOSTNAME": "envd-build-x"}}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
