package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects an MCP client to the node's /mcp with token.
func mcpSession(t *testing.T, token string) (*sdk.ClientSession, error) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "envd-e2e", Version: "0"}, nil)
	return c.Connect(ctx(t), &sdk.StreamableClientTransport{Endpoint: env.node.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
}

// mcpCall calls a tool and decodes its structured content into out (a
// tool error's into an error body), answering whether it was a tool error.
func mcpCall(t *testing.T, s *sdk.ClientSession, name string, args, out any) bool {
	t.Helper()
	res, err := s.CallTool(ctx(t), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out), "%s: %s", name, b)
	return res.IsError
}

type mcpError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// The node's /mcp is scoped to the caller's token: a tenant's tools see
// its own instances, and another tenant's id answers not_found as the API
// does; a missing or bad token is refused before any tool runs.
func TestRootMCPTenantScoped(t *testing.T) {
	c := ctx(t)
	_, tokA, ca := newTenantToken(t, "mcp-a")
	_, tokB, _ := newTenantToken(t, "mcp-b")
	_, err := ca.CreateProject(c, types.CreateProjectRequest{Name: "mcp", Base: fixtureBase})
	require.NoError(t, err)
	inst, err := ca.CreateInstance(c, "mcp", types.CreateInstanceRequest{TTL: "30m"})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ca.DeleteInstance(c, inst.ID) })

	sa, err := mcpSession(t, tokA)
	require.NoError(t, err)
	defer sa.Close()
	tools, err := sa.ListTools(c, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	assert.Contains(t, names, "exec")
	assert.Contains(t, names, "save_version")

	var run types.ExecResult
	require.False(t, mcpCall(t, sa, "exec", map[string]any{"instance": inst.ID, "command": "echo $((6*7)); exit 5"}, &run))
	assert.Equal(t, "42\n", run.Stdout)
	assert.Equal(t, 5, run.ExitCode)

	sb, err := mcpSession(t, tokB)
	require.NoError(t, err)
	defer sb.Close()
	var e mcpError
	require.True(t, mcpCall(t, sb, "exec", map[string]any{"instance": inst.ID, "command": "id"}, &e))
	assert.Equal(t, "not_found", e.Error.Code, e.Error.Message)
	var list struct{ Instances []types.Instance }
	require.False(t, mcpCall(t, sb, "list_instances", map[string]any{}, &list))
	assert.Empty(t, list.Instances, "tenant b sees none of a's instances")

	require.True(t, mcpCall(t, sa, "exec", map[string]any{"instance": inst.ID, "args": []string{"true"}, "command": "true"}, &e))
	assert.Equal(t, "invalid_argument", e.Error.Code)
	require.True(t, mcpCall(t, sa, "write_file", map[string]any{"instance": inst.ID, "content": "x"}, &e))
	assert.Equal(t, "invalid_argument", e.Error.Code, "no path: refused by the input schema, with the code")

	for _, tok := range []string{"", "not-a-token"} {
		req, err := http.NewRequestWithContext(c, http.MethodPost, env.node.URL+"/mcp",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body types.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "token %q", tok)
		assert.Equal(t, "unauthenticated", body.Error.Code)
	}
}

// newTenantToken makes a tenant with a token of its own and returns both,
// with a client that uses the token.
func newTenantToken(t *testing.T, prefix string) (tenant, token string, c *client.Client) {
	t.Helper()
	tenant = fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	tok, err := env.c.CreateToken(ctx(t), tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	c, err = client.New(env.node.URL, tok.Token)
	require.NoError(t, err)
	return tenant, tok.Token, c
}

// TestRootMCPTypeScript runs e2e/mcp's tests: the official MCP TypeScript
// SDK's client lists and calls every tool over stdio (spawning `envd mcp`)
// and over the node's /mcp, as a tenant. scripts/setup.sh --tests runs
// npm ci there.
func TestRootMCPTypeScript(t *testing.T) {
	dir, err := filepath.Abs("mcp")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("e2e/mcp/node_modules is missing or incomplete (%v): run scripts/setup.sh --tests", err)
	}
	bin := buildEnvd(t)
	tenant, token, _ := newTenantToken(t, "mcp-ts")
	cmd := commandContext(ctx(t), "node", "--test", "--test-concurrency=1", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ENVD_URL="+env.node.URL, "ENVD_TOKEN="+token, "ENVD_BIN="+bin,
		"ENVD_IMAGE="+fixtureBase, "ENVD_PROJECT="+tenant)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node --test in e2e/mcp:\n%s", out)
	t.Logf("e2e/mcp: ok %s", nodeTestSummary(string(out)))
}
