package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// memServer serves, on port 8080, a value that lives only in the memory
// of its process (the environment of a persistent nc): nothing would start
// it again after a restart, and a new start would make a new value. It
// writes the value nowhere; the test learns it through the port proxy.
const memServer = `cat > /root/serve.sh <<'EOF'
#!/bin/sh
cr=$(printf '\r')
while read -r line; do [ -z "$line" ] || [ "$line" = "$cr" ] && break; done
printf 'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s' "${#MEMDATA}" "$MEMDATA"
EOF
chmod +x /root/serve.sh
(MEMDATA=mem-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n') setsid nc -ll -p 8080 -e /root/serve.sh) </dev/null >/dev/null 2>&1 &`

// startMemWorkload starts memCounter and memServer in instance id and
// returns the server's in-memory value, read through n's port proxy.
func startMemWorkload(t *testing.T, n *node.Node, token string, c *client.Client, id string) string {
	t.Helper()
	for _, sh := range []string{memCounter, memServer} {
		res, err := c.Exec(ctx(t), id, types.ExecRequest{Args: []string{"/bin/sh", "-c", sh}})
		require.NoError(t, err)
		require.Zero(t, res.ExitCode, res.Stderr)
	}
	var body string
	require.Eventually(t, func() bool {
		var status int
		status, body = proxyGet(t, n, token, id)
		return status == http.StatusOK && strings.HasPrefix(body, "mem-")
	}, time.Minute, 200*time.Millisecond, "the in-memory server never answered")
	return body
}

// tenantOn makes a tenant of its own (its checkpoints and usage apart
// from the admin tenant's, which other tests count) and returns its token
// and a client of node n.
func tenantOn(t *testing.T, n *node.Node, prefix string) (string, *client.Client) {
	t.Helper()
	tok, err := env.c.CreateToken(ctx(t), fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1)), types.CreateTokenRequest{})
	require.NoError(t, err)
	c, err := client.New(n.URL, tok.Token)
	require.NoError(t, err)
	return tok.Token, c
}

// proxyGet is GET / of port 8080 of instance id through n's port proxy
// (which wakes a hibernated instance), with token.
func proxyGet(t *testing.T, n *node.Node, token, id string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, n.URL+"/v1/instances/"+id+"/ports/8080/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Prefer", "wait=120")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// processesNaming lists the node's processes whose command line names
// instance id (its shim, runsc's sandbox and gofer).
func processesNaming(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(id)) {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// requireFreed checks that instance id's compute is gone from n: no
// container, no process of it.
func requireFreed(t *testing.T, n *node.Node, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := n.Runtime().Status(ctx(t), id)
		return err == nil && !st.Exists
	}, time.Minute, 100*time.Millisecond, "its container is removed")
	require.Eventually(t, func() bool { return len(processesNaming(id)) == 0 }, time.Minute, 100*time.Millisecond,
		"no process of it is left: %v", processesNaming(id))
}

// A gVisor instance running a counter that lives in memory and a server
// holding a value in memory is hibernated with its memory: its task and
// processes are gone; an exec wakes it and the counter goes on from where
// it was, the server answers with its value through the port proxy, same
// id, a new generation. Left idle under the action hibernate-memory, it
// hibernates so on its own, and a proxied request resumes it.
func TestRootHibernateMemoryResumesProcesses(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	cfg := idleNodeConfig()
	cfg.RuntimeClass = "gvisor"
	n, _ := startJoiningNode(t, "hibmem", cfg)
	token, cl := tenantOn(t, n, "hibmem")
	p := fmt.Sprintf("hibmem-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
	value := startMemWorkload(t, n, token, cl, in.ID)
	countPast(t, cl, in.ID, 5)

	// hibernate --memory.
	before := countIn(t, cl, in.ID)
	began := time.Now()
	hib, err := cl.HibernateInstanceWith(c, in.ID, types.HibernateRequest{Memory: true})
	require.NoError(t, err)
	t.Logf("hibernate --memory took %s", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, types.StateStopped, hib.State)
	assert.Equal(t, lifecycle.ReasonHibernated, hib.Reason)
	require.Positive(t, hib.HibernatedVersion)
	require.Positive(t, hib.HibernatedCheckpoint)
	requireFreed(t, n, in.ID)
	cp, err := cl.GetCheckpoint(c, p, hib.HibernatedCheckpoint)
	require.NoError(t, err)
	require.NotNil(t, cp.Memory, "the checkpoint holds the memory image")
	assert.Equal(t, hib.HibernatedVersion, cp.Version)
	assert.Equal(t, in.ID, cp.Memory.ResumedBy, "the instance holds its processes")
	vs, err := cl.ListVersions(c, p)
	require.NoError(t, err)
	idx := slices.IndexFunc(vs, func(v types.Version) bool { return v.Number == hib.HibernatedVersion })
	require.GreaterOrEqual(t, idx, 0)
	assert.False(t, vs[idx].Current, "a hibernation does not move current")
	// No one else resumes the processes while the instance lives.
	_, err = cl.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: hib.HibernatedCheckpoint})
	require.ErrorIs(t, err, errdefs.ErrConflict)

	// An exec wakes it: the counter goes on, the server has its value.
	began = time.Now()
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/count"}, Wake: true})
	require.NoError(t, err)
	t.Logf("exec with wake to its answer: %s", time.Since(began).Round(time.Millisecond))
	first := 0
	_, _ = fmt.Sscan(res.Stdout, &first)
	assert.GreaterOrEqual(t, first, before, "the counter starts from its value at the hibernation, not anew")
	next := countPast(t, cl, in.ID, first)
	woken, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, woken.State)
	assert.Equal(t, in.ID, woken.ID)
	assert.Greater(t, woken.Generation, in.Generation, "a wake is a start: a new generation")
	assert.Zero(t, woken.HibernatedVersion)
	assert.Zero(t, woken.HibernatedCheckpoint)
	t.Logf("counter %d at the hibernation, %d then %d after the wake; address %s before, %s after", before, first, next, in.Address, woken.Address)
	status, body := proxyGet(t, n, token, in.ID)
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, value, body, "the server kept its in-memory value")

	// The idle action hibernate-memory does the same on its own; a
	// proxied request resumes it.
	_, err = cl.SetProjectIdle(c, p, types.IdleSetting{After: "3s", Action: types.IdleActionHibernateMemory})
	require.NoError(t, err)
	var idled types.Instance
	require.Eventually(t, func() bool {
		idled, err = cl.GetInstance(c, in.ID)
		return err == nil && idled.State == types.StateStopped && idled.Reason == envd.ReasonIdle
	}, 2*time.Minute, 250*time.Millisecond, "the idle reaper hibernates the instance")
	require.Positive(t, idled.HibernatedCheckpoint, "with its processes: %s", idled.Message)
	assert.Empty(t, idled.MemoryNotKept)
	assert.NotEqual(t, hib.HibernatedCheckpoint, idled.HibernatedCheckpoint)
	requireFreed(t, n, in.ID)
	// The hibernation's checkpoint was read while the instance was
	// frozen: what the counter shows now is at least what it showed then.
	began = time.Now()
	status, body = proxyGet(t, n, token, in.ID)
	t.Logf("proxied request with wake to its answer: %s", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, value, body, "resumed by the proxied request, the server kept its value")
	again := countIn(t, cl, in.ID)
	assert.GreaterOrEqual(t, again, next, "the counter went on from the idle hibernation")
	countPast(t, cl, in.ID, again)

	// A user who deletes the checkpoint of a hibernation gives up the
	// processes, not the files: the wake starts from the version.
	_, err = cl.SetProjectIdle(c, p, types.IdleSetting{After: "0"})
	require.NoError(t, err)
	last, err := cl.HibernateInstanceWith(c, in.ID, types.HibernateRequest{Memory: true})
	require.NoError(t, err)
	require.Positive(t, last.HibernatedCheckpoint)
	_, err = cl.DeleteCheckpoint(c, p, last.HibernatedCheckpoint)
	require.NoError(t, err)
	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/count"}, Wake: true})
	require.NoError(t, err)
	assert.NotEmpty(t, strings.TrimSpace(res.Stdout), "the files are back from the version")
	status, body = proxyGet(t, n, token, in.ID)
	assert.Equal(t, http.StatusBadGateway, status, "the server's process was not resumed: %s", body)
	woken, err = cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, woken.State)
}

// On a runc node memory cannot be kept: hibernate --memory is refused
// with memory_checkpoint_unsupported before anything changes, and the idle
// action hibernate-memory hibernates the files alone and says why.
func TestRootHibernateMemoryOnRunc(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	n, _ := startJoiningNode(t, "hibmem-runc", idleNodeConfig())
	_, cl := tenantOn(t, n, "hibmem-runc")
	p := fmt.Sprintf("hibmem-runc-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo kept > /root/work.txt"}})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	vs, err := cl.ListVersions(c, p)
	require.NoError(t, err)

	_, err = cl.HibernateInstanceWith(c, in.ID, types.HibernateRequest{Memory: true})
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported)
	var apiErr *types.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "memory_checkpoint_unsupported", apiErr.Code)
	assert.Equal(t, "class", apiErr.Details["reason"])
	assert.Contains(t, err.Error(), "gvisor", "the answer says which class can")
	got, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State)
	assert.Equal(t, in.Generation, got.Generation)
	after, err := cl.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, after, len(vs), "no version made")
	cs, err := cl.ListCheckpoints(c, p)
	require.NoError(t, err)
	assert.Empty(t, cs, "no checkpoint made")

	_, err = cl.SetProjectIdle(c, p, types.IdleSetting{After: "3s", Action: types.IdleActionHibernateMemory})
	require.NoError(t, err)
	idled := waitIdleStopped(t, cl, in.ID)
	assert.Zero(t, idled.HibernatedCheckpoint, "the files only")
	assert.Equal(t, "class", idled.MemoryNotKept)
	assert.Contains(t, idled.Message, "memory not kept (class")
	t.Logf("idle fallback: %s", idled.Message)
	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/work.txt"}, Wake: true})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", res.Stdout, "woken from its files")
	woken, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Empty(t, woken.MemoryNotKept)
}

// envd killed with SIGKILL during a hibernation with memory (while the
// memory image is written or pushed) and during the wake that resumes it:
// nothing is lost. After the first kill the instance either runs on (not
// left frozen) or, if the kill came after the commit, is hibernated; after
// the second it is hibernated again; either way the counter goes on from
// where it was once it is woken.
func TestRootKillDuringHibernateMemory(t *testing.T) {
	t.Parallel()
	bin := buildEnvd(t)
	dataDir := killDataDir(t, bin)
	gvisor := []string{"ENVD_RUNTIME_CLASS=gvisor"}
	c := context.Background()
	p, cl := startEnvdEnv(t, bin, dataDir, gvisor)
	defer func() { p.kill(t) }()
	_, err := cl.ImportImage(c, "fixture", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	_, err = cl.CreateProject(c, types.CreateProjectRequest{Name: "hibkilled", Base: "fixture"})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, "hibkilled", types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	countPast(t, cl, in.ID, 5)

	// Killed while the memory image is written or pushed.
	before := countIn(t, cl, in.ID)
	memDir := filepath.Join(dataDir, "work", "hibernate-"+in.ID+"-memory")
	go func() { _, _ = cl.HibernateInstanceWith(c, in.ID, types.HibernateRequest{Memory: true}) }()
	require.Eventually(t, func() bool { _, err := os.Stat(memDir); return err == nil }, 2*time.Minute, 5*time.Millisecond,
		"the hibernation never wrote its memory image")
	p.kill(t)
	p, cl = startEnvdEnv(t, bin, dataDir, gvisor)
	got, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	t.Logf("after the kill during the hibernation: %s (%s: %s)", got.State, got.Reason, got.Message)
	switch got.State {
	case types.StateRunning:
		seen := countIn(t, cl, in.ID)
		assert.GreaterOrEqual(t, seen, before)
		countPast(t, cl, in.ID, seen) // runs on: not left frozen
	case types.StateStopped:
		require.Positive(t, got.HibernatedCheckpoint, "stopped only once hibernated with its processes")
	default:
		t.Fatalf("after a kill during a hibernation the instance is %s (%s): %s", got.State, got.Reason, got.Message)
	}

	// Hibernated for the wake's part (again, or for the first time).
	if got.State == types.StateRunning {
		before = countIn(t, cl, in.ID)
		got, err = cl.HibernateInstanceWith(c, in.ID, types.HibernateRequest{Memory: true})
		require.NoError(t, err)
	}
	require.Positive(t, got.HibernatedCheckpoint)
	// Killed while the wake resumes it (Pending).
	go func() { _, _ = cl.StartInstance(c, in.ID) }()
	require.Eventually(t, func() bool {
		now, err := cl.GetInstance(c, in.ID)
		return err == nil && now.State == types.StatePending
	}, 2*time.Minute, 5*time.Millisecond, "the wake never began")
	p.kill(t)
	p, cl = startEnvdEnv(t, bin, dataDir, gvisor)
	require.Eventually(t, func() bool {
		got, err = cl.GetInstance(c, in.ID)
		return err == nil && got.State != types.StatePending
	}, time.Minute, 100*time.Millisecond, "the interrupted wake is settled by the next envd")
	t.Logf("after the kill during the wake: %s (%s: %s)", got.State, got.Reason, got.Message)
	require.Equal(t, types.StateStopped, got.State, "an interrupted wake is hibernated again")
	assert.Equal(t, lifecycle.ReasonRecovered, got.Reason)
	require.Positive(t, got.HibernatedCheckpoint, "with its processes")

	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/count"}, Wake: true})
	require.NoError(t, err)
	first := 0
	_, _ = fmt.Sscan(res.Stdout, &first)
	assert.GreaterOrEqual(t, first, before, "the counter resumes from the hibernation")
	countPast(t, cl, in.ID, first)
	_, err = cl.DeleteInstance(c, in.ID)
	require.NoError(t, err)
}
