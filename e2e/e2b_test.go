package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// e2bTemplate makes the tenant's project "base" (E2B's default template)
// from the fixture, with what E2B's templates have and the SDK relies on:
// /bin/bash (the SDK runs every command as /bin/bash -l -c) and /home/user.
func e2bTemplate(t *testing.T, c *client.Client) {
	t.Helper()
	e2bTemplateOf(t, c, "base", "")
}

// e2bTemplateOf is e2bTemplate for a project name of runtime class class
// ("": the node's default).
func e2bTemplateOf(t *testing.T, c *client.Client, name, class string) {
	t.Helper()
	_, err := c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: fixtureBase, RuntimeClass: class})
	require.NoError(t, err)
	in, err := c.CreateInstance(ctx(t), name, types.CreateInstanceRequest{TTL: "10m"})
	require.NoError(t, err)
	res, err := c.Exec(ctx(t), in.ID, types.ExecRequest{Args: []string{"sh", "-c",
		`printf '#!/bin/sh\nexec /bin/sh "$@"\n' > /bin/bash && chmod 755 /bin/bash && mkdir -p /home/user`}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	op, err := c.Save(ctx(t), in.ID, types.SaveRequest{Message: "e2b template"}, "")
	require.NoError(t, err)
	done, err := c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
	_, err = c.DeleteInstance(ctx(t), in.ID)
	require.NoError(t, err)
}

// TestRootE2BTypeScript runs e2e/e2b's tests: the official E2B JavaScript
// SDK from npm, pointed at the node's /e2b by its API URL, sandbox URL and
// key only, runs its quickstart and the commands, files, metadata, timeout
// and error paths. scripts/setup.sh --tests runs npm ci there.
func TestRootE2BTypeScript(t *testing.T) {
	t.Parallel() // its own tenant: it shares the node
	dir, err := filepath.Abs("e2b")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		t.Fatalf("e2e/e2b/node_modules is missing or incomplete (%v): run scripts/setup.sh --tests", err)
	}
	_, token, c := newTenantToken(t, "e2b-ts")
	e2bTemplate(t, c)
	cmd := commandContext(ctx(t), "node", "--test", "--test-concurrency=1", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+env.node.URL+"/e2b", "E2B_SANDBOX_URL="+env.node.URL+"/e2b",
		"E2B_API_KEY="+token, "E2B_DOMAIN=", "E2B_DEBUG=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node --test in e2e/e2b:\n%s", out)
	t.Logf("e2e/e2b: ok %s", nodeTestSummary(string(out)))
}

// e2bDo sends an E2B call (REST, or the daemon's for sandbox) with key.
func e2bDo(t *testing.T, method, path, key, sandbox, contentType string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, env.node.URL+"/e2b"+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", key)
	if sandbox != "" {
		req.Header.Set("X-Access-Token", key)
		req.Header.Set("E2b-Sandbox-Id", sandbox)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// envelope is one Connect stream message.
func envelope(msg string) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// readEnvelopes reads a Connect stream's messages; the last is the end.
func readEnvelopes(t *testing.T, r io.Reader) (msgs []map[string]any, end map[string]any) {
	t.Helper()
	br := bufio.NewReader(r)
	for {
		var hdr [5]byte
		_, err := io.ReadFull(br, hdr[:])
		require.NoError(t, err, "the stream ends with an end-of-stream message")
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		_, err = io.ReadFull(br, b)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), "%s", b)
		if hdr[0]&0x02 != 0 {
			return msgs, m
		}
		msgs = append(msgs, m)
	}
}

// The protocol mapping seen on the wire: REST create with metadata, a
// Connect server stream of a command's events (start, data as base64,
// end with the exit code), a unary call, /files, and the errors: another
// tenant's key (404 / not_found), a bad key (401 / unauthenticated), an
// unmapped route (501), a protobuf-coded call (unimplemented).
func TestRootE2BProtocol(t *testing.T) {
	t.Parallel()
	_, token, c := newTenantToken(t, "e2b-wire")
	_, other, _ := newTenantToken(t, "e2b-wire-other")
	e2bTemplate(t, c)

	resp := e2bDo(t, http.MethodPost, "/v2/sandboxes", token, "", "application/json",
		[]byte(`{"templateID":"base","timeout":120,"metadata":{"k":"v"}}`))
	var sb struct{ SandboxID, TemplateID, EnvdVersion, EnvdAccessToken string }
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sb))
	resp.Body.Close()
	assert.Equal(t, "base", sb.TemplateID)
	assert.Equal(t, token, sb.EnvdAccessToken, "the daemon's token is the caller's envd token")
	in, err := c.GetInstance(ctx(t), sb.SandboxID)
	require.NoError(t, err, "the sandbox is an envd instance")
	assert.Equal(t, "base", in.Project)
	require.NotNil(t, in.ExpiresAt)

	start := func(key, cmd string) *http.Response {
		return e2bDo(t, http.MethodPost, "/process.Process/Start", key, sb.SandboxID, "application/connect+json",
			envelope(`{"process":{"cmd":"/bin/sh","args":["-c",`+strconvQuote(cmd)+`]}}`))
	}
	resp = start(token, "echo out; echo err >&2; exit 7")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/connect+json", resp.Header.Get("Content-Type"))
	msgs, end := readEnvelopes(t, resp.Body)
	resp.Body.Close()
	assert.Empty(t, end, "a clean end of stream")
	require.NotEmpty(t, msgs)
	first := msgs[0]["event"].(map[string]any)
	require.Contains(t, first, "start")
	var stdout, stderr string
	var last map[string]any
	for _, m := range msgs[1:] {
		ev := m["event"].(map[string]any)
		if d, ok := ev["data"].(map[string]any); ok {
			for k, v := range d {
				b, err := base64.StdEncoding.DecodeString(v.(string))
				require.NoError(t, err)
				if k == "stdout" {
					stdout += string(b)
				} else {
					stderr += string(b)
				}
			}
		}
		last = ev
	}
	assert.Equal(t, "out\n", stdout)
	assert.Equal(t, "err\n", stderr)
	require.Contains(t, last, "end")
	assert.Equal(t, map[string]any{"exitCode": float64(7), "exited": true, "status": "exit status 7"}, last["end"])

	// Another tenant's key: the sandbox is not found, on both surfaces.
	resp = start(other, "id")
	_, end = readEnvelopes(t, resp.Body)
	resp.Body.Close()
	assert.Equal(t, "not_found", end["error"].(map[string]any)["code"])
	resp = e2bDo(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, other, "", "", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp.Body.Close()

	// A bad key: 401 with E2B's error body.
	resp = e2bDo(t, http.MethodGet, "/v2/sandboxes", "not-a-token", "", "", nil)
	var e struct {
		Code    int
		Message string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, 401, e.Code)

	// Unary: List answers no running process; a protobuf call is refused.
	resp = e2bDo(t, http.MethodPost, "/process.Process/List", token, sb.SandboxID, "application/json", []byte(`{}`))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.JSONEq(t, `{"processes":[]}`, string(b))
	resp = e2bDo(t, http.MethodPost, "/process.Process/List", token, sb.SandboxID, "application/proto", nil)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Contains(t, string(b), `"code":"unimplemented"`)

	// /files: an octet-stream upload, read back, and through envd's own API.
	resp = e2bDo(t, http.MethodPost, "/files?path=/tmp/wire/x.txt", token, sb.SandboxID, "application/octet-stream", []byte("wire"))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.JSONEq(t, `[{"name":"x.txt","type":"file","path":"/tmp/wire/x.txt"}]`, string(b))
	resp = e2bDo(t, http.MethodGet, "/files?path=/tmp/wire/x.txt", token, sb.SandboxID, "", nil)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "wire", string(b))
	cat, err := c.Exec(ctx(t), sb.SandboxID, types.ExecRequest{Args: []string{"cat", "/tmp/wire/x.txt"}})
	require.NoError(t, err)
	assert.Equal(t, "wire", cat.Stdout, "written through envd's file API")

	// Unmapped: a clear 501, not a 404 an SDK reads as "not found".
	resp = e2bDo(t, http.MethodGet, "/templates", token, "", "", nil)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Contains(t, string(b), "not mapped")

	resp = e2bDo(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, token, "", "", nil)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp = e2bDo(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, token, "", "", nil)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "killed")
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return strings.TrimSpace(string(b))
}

// TestRootE2BPauseKeepsMemory: the E2B SDK's pause({keepMemory: true})
// (body {"memory": true}) of a sandbox of a gvisor template hibernates it
// with its processes, and connect continues them: memHolder's count goes
// on from where it was and the value it holds only in memory is kept. On a
// runc template the same pause is refused (400, not the 409 the SDK reads
// as "already paused") and the sandbox runs on.
func TestRootE2BPauseKeepsMemory(t *testing.T) {
	t.Parallel()
	_, token, c := newTenantToken(t, "e2b-mem")
	e2bTemplateOf(t, c, "gbase", "gvisor")
	e2bTemplateOf(t, c, "base", "")
	create := func(template string) string {
		resp := e2bDo(t, http.MethodPost, "/v2/sandboxes", token, "", "application/json",
			[]byte(`{"templateID":"`+template+`","timeout":600}`))
		defer resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		var sb struct{ SandboxID string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&sb))
		t.Cleanup(func() { _, _ = c.DeleteInstance(context.Background(), sb.SandboxID) })
		return sb.SandboxID
	}
	pause := func(id string) (int, string) {
		resp := e2bDo(t, http.MethodPost, "/sandboxes/"+id+"/pause", token, "", "application/json", []byte(`{"memory":true}`))
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	state := func(id string) (int, string) {
		out := strings.Fields(mustExec(t, c, id, "cat /root/state"))
		require.Len(t, out, 2, "state of %s", id)
		n, err := strconv.Atoi(out[0])
		require.NoError(t, err)
		return n, out[1]
	}
	past := func(id string, n int) int {
		var got int
		require.Eventually(t, func() bool { got, _ = state(id); return got > n }, 2*time.Minute, 100*time.Millisecond,
			"the holder in %s does not go past %d", id, n)
		return got
	}

	id := create("gbase")
	mustExec(t, c, id, memHolder)
	mustExec(t, c, id, "echo kept > /root/set && kill -USR1 $(cat /root/pid)")
	require.Eventually(t, func() bool { _, v := state(id); return v == "kept" }, 2*time.Minute, 100*time.Millisecond)
	mustExec(t, c, id, "rm /root/set") // the value now lives in the shell's memory only
	before := past(id, 5)

	status, body := pause(id)
	require.Equal(t, http.StatusNoContent, status, body)
	in, err := c.GetInstance(ctx(t), id)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, in.State, "paused: the compute is freed")
	require.Positive(t, in.HibernatedCheckpoint, "hibernated with its memory")

	resp := e2bDo(t, http.MethodPost, "/sandboxes/"+id+"/connect", token, "", "application/json", []byte(`{"timeout":600}`))
	resp.Body.Close()
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, resp.StatusCode)
	after := past(id, before) // the program runs again, from where it was
	_, v := state(id)
	assert.Equal(t, "kept", v, "the value held only in memory survived the pause")
	t.Logf("count %d before the pause, past %d after the connect", before, after)

	rid := create("base")
	status, body = pause(rid)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `"error_code":"memory_checkpoint_unsupported"`)
	in, err = c.GetInstance(ctx(t), rid)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, in.State, "a refused pause changes nothing")
}
