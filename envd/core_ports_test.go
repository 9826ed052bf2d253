package envd_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
)

// Preview tokens open one port of one instance of one tenant until they
// expire; public ports open without one; every refusal looks the same.
func TestCorePreviewAccess(t *testing.T) {
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})

	tok, err := e.svc.Parts().Ports.PreviewToken(e.ctx, e.user, in.ID, 3000, types.PreviewTokenRequest{TTL: "1m"})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute), tok.ExpiresAt, 3*time.Second)
	p, exp, err := e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 3000, tok.Token)
	require.NoError(t, err)
	assert.Equal(t, types.Principal{Tenant: testTenant}, p)
	assert.True(t, exp.Equal(tok.ExpiresAt))

	// Another tenant, with an instance of its own.
	otherTok, err := e.svc.Parts().Tokens.CreateToken(e.ctx, e.admin, "other", types.CreateTokenRequest{})
	require.NoError(t, err)
	other, err := e.svc.Parts().Tokens.Authenticate(e.ctx, otherTok.Token)
	require.NoError(t, err)
	_, err = e.svc.CreateProject(e.ctx, other, types.CreateProjectRequest{Name: "theirs", Base: baseImage}, "")
	require.NoError(t, err)
	theirs, err := e.svc.Parts().Instances.CreateInstance(e.ctx, other, "theirs", types.CreateInstanceRequest{}, "")
	require.NoError(t, err)
	theirTok, err := e.svc.Parts().Ports.PreviewToken(e.ctx, other, theirs.ID, 3000, types.PreviewTokenRequest{})
	require.NoError(t, err)
	_, err = e.svc.Parts().Ports.PreviewToken(e.ctx, other, in.ID, 3000, types.PreviewTokenRequest{})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "a token for another tenant's instance")

	for name, tc := range map[string]struct {
		id    string
		port  int
		token string
	}{
		"no token":                      {in.ID, 3000, ""},
		"another port":                  {in.ID, 3001, tok.Token},
		"another tenant's instance":     {theirs.ID, 3000, tok.Token},
		"their token on ours":           {in.ID, 3000, theirTok.Token},
		"unknown instance":              {"web-00000000", 3000, tok.Token},
		"malformed id":                  {"../x", 3000, tok.Token},
		"garbage token":                 {in.ID, 3000, "not-a-token"},
		"a port out of range":           {in.ID, 0, tok.Token},
		"the token with a changed byte": {in.ID, 3000, tok.Token[:len(tok.Token)-2] + flipChar(tok.Token[len(tok.Token)-2]) + tok.Token[len(tok.Token)-1:]},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.svc.Parts().Ports.PreviewAccess(e.ctx, tc.id, tc.port, tc.token)
			assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
		})
	}

	t.Run("ttl", func(t *testing.T) {
		for _, ttl := range []string{"0s", "-1m", "169h", "soon"} {
			_, err := e.svc.Parts().Ports.PreviewToken(e.ctx, e.user, in.ID, 3000, types.PreviewTokenRequest{TTL: ttl})
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, ttl)
		}
		def, err := e.svc.Parts().Ports.PreviewToken(e.ctx, e.user, in.ID, 3000, types.PreviewTokenRequest{})
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(time.Hour), def.ExpiresAt, 3*time.Second)
	})

	t.Run("expired", func(t *testing.T) {
		short, err := e.svc.Parts().Ports.PreviewToken(e.ctx, e.user, in.ID, 3000, types.PreviewTokenRequest{TTL: "1s"})
		require.NoError(t, err)
		time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
		_, _, err = e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 3000, short.Token)
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
		assert.ErrorContains(t, err, "expired")
	})

	t.Run("public ports", func(t *testing.T) {
		got, err := e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Public: []int{3001, 80, 3001}})
		require.NoError(t, err)
		assert.Equal(t, []int{80, 3001}, got.Public)
		read, err := e.svc.Parts().Ports.GetProjectPorts(e.ctx, e.user, "web")
		require.NoError(t, err)
		assert.Equal(t, got, read)

		p, exp, err := e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 3001, "")
		require.NoError(t, err)
		assert.Equal(t, testTenant, p.Tenant)
		assert.True(t, exp.IsZero())
		_, _, err = e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 3002, "")
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "only the listed ports")
		_, _, err = e.svc.Parts().Ports.PreviewAccess(e.ctx, theirs.ID, 3001, "")
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "only the project's instances")

		for name, ports := range map[string][]int{"zero": {0}, "too high": {65536}, "too many": make([]int, 65)} {
			_, err := e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Public: ports})
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
		}
		_, err = e.svc.Parts().Ports.SetProjectPorts(e.ctx, other, "web", types.ProjectPorts{Public: []int{80}})
		assert.ErrorIs(t, err, errdefs.ErrNotFound)

		cleared, err := e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{})
		require.NoError(t, err)
		assert.Equal(t, []int{}, cleared.Public)
		_, _, err = e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 3001, "")
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
	})

	t.Run("forwarded ports", func(t *testing.T) {
		fwd := []types.ForwardedPort{{Port: 5173, Label: "vite", Scheme: "https"}, {Port: 3001}}
		got, err := e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Public: []int{80}, Forwarded: fwd})
		require.NoError(t, err)
		assert.Equal(t, []types.ForwardedPort{{Port: 3001}, {Port: 5173, Label: "vite", Scheme: "https"}}, got.Forwarded)
		// A PUT without forwarded (envctl public-ports) keeps them.
		got, err = e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Public: []int{}})
		require.NoError(t, err)
		assert.Len(t, got.Forwarded, 2)
		_, _, err = e.svc.Parts().Ports.PreviewAccess(e.ctx, in.ID, 5173, "")
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "forwarding grants no access")
		for name, f := range map[string][]types.ForwardedPort{
			"port twice": {{Port: 1}, {Port: 1}}, "bad port": {{Port: 0}}, "bad scheme": {{Port: 1, Scheme: "ftp"}},
			"label with a line break": {{Port: 1, Label: "a\nb"}},
		} {
			_, err := e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Forwarded: f})
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
		}
		got, err = e.svc.Parts().Ports.SetProjectPorts(e.ctx, e.user, "web", types.ProjectPorts{Forwarded: []types.ForwardedPort{}})
		require.NoError(t, err)
		assert.Empty(t, got.Forwarded)
	})

	t.Run("dial", func(t *testing.T) {
		_, err := e.svc.Parts().Ports.DialInstance(e.ctx, other, in.ID, 3000)
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		_, err = e.svc.Parts().Ports.DialInstance(e.ctx, e.user, in.ID, 70000)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		_, err = e.svc.Parts().Ports.ListPorts(e.ctx, other, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})
}

func flipChar(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// Past the node's thread high-water mark, new streams, saves and dials are
// refused with 429 resource_exhausted (kind threads) before they start;
// below it they are admitted.
func TestCoreThreadGuard(t *testing.T) {
	e := newCoreEnv(t, func(c *envd.Config) { c.ThreadHighWater = 1 }) // every Go process runs more
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})

	_, err := e.svc.Admit(e.user, types.AdmitExec)
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	assert.Equal(t, 429, errdefs.HTTPStatus(err))
	assert.Contains(t, err.Error(), "past its high-water mark of 1")
	var te *envd.ThreadsExhaustedError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, map[string]any{"kind": "threads", "limit": 1, "retry_after_seconds": 5}, te.Details())
	assert.Equal(t, 5*time.Second, te.RetryAfter())

	_, err = e.svc.Parts().Ports.DialInstance(e.ctx, e.user, in.ID, 3000)
	assert.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	_, err = e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
	assert.ErrorIs(t, err, errdefs.ErrResourceExhausted)

	ok := newCoreEnv(t, func(c *envd.Config) { c.ThreadHighWater = 100_000 })
	release, err := ok.svc.Admit(ok.user, types.AdmitExec)
	require.NoError(t, err)
	release()
}
