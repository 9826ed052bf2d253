package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// TestRootConsole uses the web console (/console/) in Debian's headless
// Chromium as a person would, against this package's node (whose every
// request and answer is checked against docs/openapi.yaml): sign in with a
// tenant's token, create a project, start an instance, type in its
// terminal, write and read back a file, save and watch the progress reach
// committed, see the new version in the history, switch back to version 1,
// see a conflict when another client switched first, open a preview link,
// use the admin page, and be sent back to sign-in when the token is revoked
// or expired. Any console error or uncaught exception of the page fails the
// test, but for the HTTP errors a step provokes on purpose. Screenshots of
// every page, at 1280x800 and 400 px wide, go to $ENVD_ARTIFACTS/console
// (or the test's temporary directory); their paths are logged.
func TestRootConsole(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	tenant := fmt.Sprintf("console-%d", time.Now().UnixNano()%1_000_000)
	tok, err := env.c.CreateToken(ctx(t), tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	tc, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)

	// The node's root sends a browser to the console, which asks for a token.
	start := time.Now()
	b.do(chromedp.Navigate(env.node.URL + "/"))
	b.waitVisible("#signin-form")
	t.Logf("console: sign-in page usable %v after navigating to /", time.Since(start).Round(time.Millisecond))
	nav := b.eval(`JSON.stringify((({domContentLoadedEventEnd: d, loadEventEnd: l}) => ({d, l}))(performance.getEntriesByType("navigation")[0]))`)
	t.Logf("console: navigation timing of /console/ (ms): %s", nav)
	assert.Equal(t, env.node.URL+"/console/#/signin", b.eval(`location.href`))
	b.shoot("01-signin")

	// A wrong token is refused on the page, and nothing is kept.
	b.expectHTTPError("/v1/usage", 401)
	b.signIn("not-a-token")
	b.waitText("#signin-problem", "unauthenticated")
	assert.Equal(t, "null", b.eval(`String(sessionStorage.getItem("envd.console.token"))`))

	// Sign in: the tenant's name in the header, the projects page.
	b.signIn(tok.Token)
	b.waitText("#tenant", tenant)
	b.waitText("#page-title", "Projects")
	assert.NotContains(t, b.eval(`location.href`), tok.Token, "the token is in the URL")

	// Create a project: its page, current v1.
	project := fmt.Sprintf("web-%d", projectSeq.Add(1))
	b.eval(`document.querySelector("#new-project-base").value = ` + jsString(fixtureBase))
	b.do(chromedp.SendKeys(chromedp.CSS("#new-project-name"), project), chromedp.Click(chromedp.CSS("#create-project button[type=submit]")))
	b.waitText("#page-title", "Project "+project)
	b.waitText("#current-version", "v1")
	b.waitVisible("#version-1 .badge.current")

	// Start an instance: the restore's events, then the instance page, Running.
	b.do(chromedp.Click(chromedp.CSS("#start-instance-button")))
	b.waitText("#page-title", "Instance "+project+"-")
	b.waitText("#instance-state", "Running")
	id := strings.TrimPrefix(b.text("#page-title"), "Instance ")
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), id) })
	in, err := tc.GetInstance(ctx(t), id)
	require.NoError(t, err)
	assert.Equal(t, in.Protection.LostOnRemove, b.text("#lost-on-rm"), "the instance page says what rm loses in the API's (and envctl show's) words")
	assert.Equal(t, in.Protection.LostOnStop, b.text("#lost-on-stop"))
	assert.Equal(t, strconv.FormatInt(in.Generation, 10), b.text("#instance-generation"))

	// The terminal: a shell over the exec WebSocket echoes what is typed.
	b.waitVisible(`#terminal[data-connected="true"]`)
	b.waitPrompt()
	b.typeInTerminal("echo hello-console\r")
	b.waitTerminalRow("hello-console")
	assert.True(t, b.terminalHasRow(func(r string) bool { return strings.Contains(r, "echo hello-console") }), "the typed command is echoed")
	b.shoot("03-instance")
	// Resize: the shell sees the size the page shows.
	b.do(chromedp.EmulateViewport(900, 800))
	b.waitText("#terminal-state", "Connected")
	time.Sleep(500 * time.Millisecond) // the page's resize reaches the shell asynchronously, like SIGWINCH
	size := regexp.MustCompile(`\((\d+)×(\d+)\)`).FindStringSubmatch(b.text("#terminal-state"))
	require.NotNil(t, size, b.text("#terminal-state"))
	b.typeInTerminal("stty size\r")
	b.waitTerminalRow(size[2] + " " + size[1])
	b.do(chromedp.EmulateViewport(1280, 800))
	// Exit, then reconnect: a new shell in the same terminal.
	b.typeInTerminal("exit\r")
	b.waitText("#terminal-state", "exited with code 0")
	b.do(chromedp.Click(chromedp.CSS("#terminal-reconnect")))
	b.waitVisible(`#terminal[data-connected="true"]`)
	b.waitPrompt()
	b.typeInTerminal("echo again-$((40+2))\r")
	b.waitTerminalRow("again-42")

	// Files: write a file in the editor, see it listed, read it back.
	b.do(chromedp.Click(chromedp.CSS("#tab-files")))
	b.waitText("#dir-h", "Directory /")
	b.do(chromedp.SendKeys(chromedp.CSS("#new-file-name"), "console-note.txt"), chromedp.Click(chromedp.CSS("#files-new button[type=submit]")))
	b.waitVisible("#editor-text")
	content := "written in the browser\nline two\n"
	b.do(chromedp.SendKeys(chromedp.CSS("#editor-text"), content), chromedp.Click(chromedp.CSS("#editor-save")))
	b.waitText("#editor-saved", "Wrote /console-note.txt")
	b.waitVisible(`#files-table button[data-path="/console-note.txt"]`)
	assert.Equal(t, strings.TrimSpace(content), tenantSh(t, tc, id, "cat /console-note.txt"), "the file the page wrote is in the instance")
	tenantSh(t, tc, id, "echo 'changed outside' > /console-note.txt")
	b.do(chromedp.Click(chromedp.CSS(`#files-table button[data-path="/console-note.txt"]`)))
	b.waitValue("#editor-text", "changed outside\n")
	b.shoot("04-files")
	// Delete asks first: one press arms the button, the second deletes.
	tenantSh(t, tc, id, "echo bye > /delete-me.txt")
	b.do(chromedp.Click(chromedp.CSS("#files-go button[type=submit]")))
	del := chromedp.CSS(`button[data-delete="/delete-me.txt"]`)
	b.do(chromedp.Click(del))
	b.waitText(`button[data-delete="/delete-me.txt"]`, "Press again")
	assert.Equal(t, "bye", tenantSh(t, tc, id, "cat /delete-me.txt"), "one press deleted the file")
	b.do(chromedp.Click(del))
	b.poll(`!document.querySelector('button[data-delete="/delete-me.txt"]')`, "the deleted file to leave the list")
	assert.Equal(t, "gone", tenantSh(t, tc, id, "test -e /delete-me.txt && echo there || echo gone"))

	// Save: the progress reaches committed, step by step.
	b.do(chromedp.Click(chromedp.CSS("#tab-overview")))
	b.waitText("#instance-state", "Running")
	b.do(chromedp.SendKeys(chromedp.CSS("#save-message"), "from the console"), chromedp.Click(chromedp.CSS("#save-button")))
	b.waitText("#save-outcome", "Saved as v2, now current.")
	for _, step := range []string{"spooled", "encoded", "pushed", "committed"} {
		assert.Equal(t, "done", b.eval(`document.querySelector("#step-`+step+`").className`), "save step %s", step)
	}
	events := b.eval(`JSON.stringify(Array.from(document.querySelectorAll("#save-events li")).map(li => li.dataset.type))`)
	assert.Regexp(t, `"spooled".*"encoded".*"pushed".*"committed"`, events, "the events in their order")
	b.shoot("05-saved")

	// The new version in the history, current; then back to version 1.
	b.do(chromedp.Navigate(env.node.URL + "/console/#/projects/" + project))
	b.waitText("#current-version", "v2")
	b.waitText("#version-2 .v-msg", "from the console")
	b.waitVisible("#version-2 .badge.current")
	b.waitText("#chart-desc", "v2")
	b.shoot("06-history")
	b.do(chromedp.Click(chromedp.CSS("#version-1 button.switch")))
	b.waitText("#switch-message", "Current is now v1 (was v2).")
	b.waitText("#current-version", "v1")
	b.waitVisible("#version-1.is-current")
	p, err := tc.GetProject(ctx(t), project)
	require.NoError(t, err)
	assert.Equal(t, 1, p.Current)

	// Another client switches first: the page's switch is a conflict, said
	// as such, with the value current has now.
	one := 1
	_, err = tc.SetCurrent(ctx(t), project, types.SetCurrentRequest{Version: 2, ExpectedCurrent: &one})
	require.NoError(t, err)
	b.expectHTTPError("/v1/projects/"+project+"/current", 409)
	b.do(chromedp.Click(chromedp.CSS("#version-2 button.switch")))
	b.waitText("#conflict-message", "It is now v2, not v1 as this page showed")
	b.waitText("#current-version", "v2")
	b.shoot("07-conflict")

	// Pin, then roll back (the button names the version before current).
	b.do(chromedp.Click(chromedp.CSS("#version-2 .actions button:nth-of-type(1)")))
	b.waitVisible("#version-2 .badge.pinned")
	v2, err := tc.GetVersion(ctx(t), project, 2)
	require.NoError(t, err)
	assert.True(t, v2.Pinned)
	b.waitText("#rollback", "Roll back to v1")
	b.do(chromedp.Click(chromedp.CSS("#rollback")))
	b.waitText("#switch-message", "Current is now v1 (was v2).")
	b.waitVisible("#version-1.is-current")

	// What changed between v1 and v2.
	b.do(chromedp.Click(chromedp.CSS("#compare-h ~ form button[type=submit]")))
	b.waitText("#changes-totals", "v1 → v2")
	b.waitText("#changes-out", "/console-note.txt")

	// A Dockerfile build from the page: its events as they come, then
	// BuildKit's log, the new version in the history (not current: not
	// asked), and the file its RUN step wrote in an instance of it.
	b.eval(`document.querySelector("#build-kind").value = "dockerfile"`)
	b.eval(`document.querySelector("#build-dockerfile").value = ` + jsString("FROM "+fixtureBase+"\nRUN echo built-in-the-console > /etc/console-built\n"))
	b.do(chromedp.Click(chromedp.CSS("#build-submit")))
	b.waitText("#build-message", "Built v3")
	b.waitText("#build-events", "buildkit")
	b.waitText("#build-events", "built")
	b.waitText("#build-log", "RUN echo built-in-the-console")
	b.waitVisible("#version-3")
	b.waitText("#version-3", "Dockerfile")
	b.waitText("#current-version", "v1")
	built, err := tc.GetVersion(ctx(t), project, 3)
	require.NoError(t, err)
	assert.Equal(t, "build", built.Kind)
	assert.False(t, built.Current)
	bin, err := tc.CreateInstance(ctx(t), project, types.CreateInstanceRequest{Version: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), bin.ID) })
	res, err := tc.Exec(ctx(t), bin.ID, types.ExecRequest{Args: []string{"cat", "/etc/console-built"}})
	require.NoError(t, err)
	assert.Equal(t, "built-in-the-console\n", res.Stdout)
	_, err = tc.DeleteInstance(ctx(t), bin.ID)
	require.NoError(t, err)
	b.shoot("06b-build")

	// The projects list: current version, instances running, stored bytes.
	b.do(chromedp.Click(chromedp.CSS("#nav-projects")))
	b.waitText("#projects-table", project)
	row := b.eval(`Array.from(document.querySelectorAll("#projects-table tbody tr")).map(r => r.innerText).find(r => r.startsWith(` + jsString(project) + `)) || ""`)
	assert.Regexp(t, `^`+regexp.QuoteMeta(project)+`\s+v1\s+1\s+\d`, row)
	b.shoot("02-projects")

	// Checkpoints: one with memory (a gvisor project's counter, checkpointed
	// through the API) is listed as holding memory, with its sizes and
	// freeze window; "Resume with memory" starts an instance that continues
	// its processes: the counter goes on from where it was.
	mp := fmt.Sprintf("mem-%d", projectSeq.Add(1))
	_, err = tc.CreateProject(ctx(t), types.CreateProjectRequest{Name: mp, Base: fixtureBase, RuntimeClass: "gvisor"})
	require.NoError(t, err)
	mi, err := tc.CreateInstance(ctx(t), mp, types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = tc.Exec(ctx(t), mi.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	counted := countPast(t, tc, mi.ID, 5)
	mc := memCheckpoint(t, tc, mi.ID).Checkpoint
	require.NotNil(t, mc.Memory)
	_, err = tc.DeleteInstance(ctx(t), mi.ID)
	require.NoError(t, err)
	b.do(chromedp.Navigate(env.node.URL + "/console/#/projects/" + mp))
	b.waitVisible(`#checkpoints-table [data-memory="yes"]`)
	cprow := b.text("#checkpoints-table tbody tr")
	assert.Contains(t, cprow, fmt.Sprintf("%d ms (engine %d ms)", mc.FreezeMS, mc.Memory.FreezeMS), "the freeze window, the engine's part named")
	assert.Contains(t, cprow, "new)", "the memory image's stored and new bytes")
	b.shoot("09-checkpoints")
	b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`button.resume[data-checkpoint="%d"]`, mc.ID))))
	b.waitText("#page-title", "Instance "+mp+"-")
	b.waitText("#instance-state", "Running")
	rid := strings.TrimPrefix(b.text("#page-title"), "Instance ")
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), rid) })
	resumedAt := countIn(t, tc, rid)
	assert.GreaterOrEqual(t, resumedAt, counted, "resumed from the checkpoint's counter, not from 1")
	countPast(t, tc, rid, resumedAt) // only the resumed process counts
	got, err := tc.GetCheckpoint(ctx(t), mp, mc.ID)
	require.NoError(t, err)
	assert.Equal(t, rid, got.Memory.ResumedBy)

	// Ports: a preview link opens what the instance serves.
	tenantSh(t, tc, id, "mkdir -p /www && echo hello-preview > /www/index.html && touch /www/favicon.ico && busybox httpd -p 127.0.0.1:8080 -h /www && sleep 0.5")
	b.do(chromedp.Navigate(env.node.URL + "/console/#/instances/" + id + "/ports"))
	b.waitText("#ports-table", "8080")
	b.do(chromedp.Click(chromedp.CSS("#ports-table tbody button")))
	b.waitVisible(".preview-link")
	b.shoot("08-ports")
	link := b.eval(`document.querySelector(".preview-link").href`)
	u, err := url.Parse(link)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("8080-%s.%s", id, previewDomain), u.Hostname())
	b.do(chromedp.Navigate(link))
	b.waitText("body", "hello-preview")
	b.do(chromedp.Navigate(env.node.URL + "/console/#/projects"))
	b.waitText("#tenant", tenant)

	// Keyboard only: Tab reaches the links and buttons, focus is visible.
	b.do(chromedp.Navigate(env.node.URL + "/console/#/instances/" + id))
	b.waitText("#instance-state", "Running")
	focused := map[string]bool{}
	for range 12 {
		b.do(chromedp.KeyEvent("\t"))
		f := b.eval(`(() => { const e = document.activeElement; return e ? e.tagName + "#" + (e.id || e.textContent.trim().slice(0, 20)) + "|" + getComputedStyle(e).outlineStyle : "" })()`)
		focused[f] = true
	}
	var visible int
	for f := range focused {
		if !strings.HasSuffix(f, "|none") {
			visible++
		}
	}
	assert.Greater(t, visible, 5, "Tab moves the focus through the page with a visible outline: %v", focused)

	// The lifecycle verbs: pause, resume, renew, then rm (which asks first,
	// saying what it loses).
	b.do(chromedp.Click(chromedp.CSS("#action-pause")))
	b.waitText("#instance-state", "Paused")
	b.waitText("#instance-reason", "user_pause")
	b.do(chromedp.Click(chromedp.CSS("#action-resume")))
	b.waitText("#instance-state", "Running")
	before, err := tc.GetInstance(ctx(t), id)
	require.NoError(t, err)
	b.eval(`document.querySelector("#renew-ttl").value = "30m"`)
	b.do(chromedp.Click(chromedp.CSS("#action-renew")))
	b.waitText("#instance-flash", "Renew: the instance is Running")
	after, err := tc.GetInstance(ctx(t), id)
	require.NoError(t, err)
	assert.True(t, after.ExpiresAt.Before(*before.ExpiresAt), "renew to 30m shortened the 1h TTL: %v -> %v", before.ExpiresAt, after.ExpiresAt)
	b.poll(`/\(in (29|30)m\)/.test(document.querySelector("#instance-expires").textContent)`, "the expiry to show 30 minutes from now")
	b.do(chromedp.Click(chromedp.CSS("#action-rm")))
	b.waitText("#rm-confirm", "Removing loses: "+after.Protection.LostOnRemove)
	b.do(chromedp.Click(chromedp.CSS("#action-rm-confirm")))
	b.waitText("#instance-state", "Terminated")
	b.waitText("#instance-reason", "user_delete")

	// Admin: tenants, tokens, usage and quotas, GC with a dry run, nodes.
	b.do(chromedp.Click(chromedp.CSS("#sign-out")))
	b.waitText("#signed-out-message", "You signed out.")
	b.expectHTTPError("/v1/nodes", 404) // until the node lists its cluster's nodes
	b.signIn(env.node.Token)
	b.waitVisible("#nav-admin")
	b.do(chromedp.Click(chromedp.CSS("#nav-admin")))
	b.waitText("#tenants-table", tenant)
	b.waitText("#tokens-table", tenant)
	b.waitVisible("#nodes-h")
	b.do(chromedp.Click(chromedp.CSS("#gc-form button[type=submit]")))
	b.waitText("#gc-summary", "Dry run: would delete")
	b.shoot("09-admin")
	b.do(chromedp.Click(chromedp.CSS("#sign-out")))

	// A revoked token sends the page back to sign-in, saying why.
	b.signIn(tok.Token)
	b.waitText("#tenant", tenant)
	b.waitVisible("#projects-table")
	_, err = env.c.RevokeToken(ctx(t), tok.ID)
	require.NoError(t, err)
	b.expectHTTPError("/v1/", 401)
	b.do(chromedp.Click(chromedp.CSS("#nav-instances")))
	b.waitText("#signed-out-message", "token revoked")
	b.waitVisible("#signin-form")
	assert.Equal(t, "null", b.eval(`String(sessionStorage.getItem("envd.console.token"))`))

	// So does an expired one.
	short, err := env.c.CreateToken(ctx(t), tenant, types.CreateTokenRequest{ExpiresIn: "15s"})
	require.NoError(t, err)
	b.signIn(short.Token)
	b.waitText("#tenant", tenant)
	b.waitVisible("#projects-table")
	time.Sleep(time.Until(*short.ExpiresAt) + time.Second)
	b.do(chromedp.Click(chromedp.CSS("#nav-instances")))
	b.waitText("#signed-out-message", "token expired")
	b.shoot("10-signed-out")
}

// tenantSh runs a script that must succeed in the tenant's instance.
func tenantSh(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	res, err := c.Exec(ctx(t), id, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
	require.NoError(t, err)
	require.Equalf(t, 0, res.ExitCode, "script %q\nstdout: %s\nstderr: %s", script, res.Stdout, res.Stderr)
	return strings.TrimSpace(res.Stdout)
}

// browser is one headless Chromium tab, with the console messages of its
// pages.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu       sync.Mutex
	errors   []string
	expected []expectedError
}

// expectedError is an HTTP error answer a step provokes: Chromium reports
// every failed request as a console error ("Failed to load resource").
type expectedError struct {
	path   string
	status int
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on PATH (%v): run scripts/setup.sh (Debian's chromium package)", err)
	}
	shots := filepath.Join(t.TempDir(), "screenshots")
	if dir := os.Getenv("ENVD_ARTIFACTS"); dir != "" {
		shots = filepath.Join(dir, "console")
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		// Preview hosts ({port}-{instance}.preview.test) are the node's own
		// listener; the rule names only them, so 127.0.0.1 itself resolves
		// as ever.
		chromedp.Flag("host-resolver-rules", "MAP *."+previewDomain+" 127.0.0.1"),
	)
	t.Cleanup(cancelAlloc)
	c, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: c, shots: shots}
	require.NoError(t, chromedp.Do(c, chromedp.EmulateViewport(1280, 800)))
	messages := chromedp.Console(c)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.record(m)
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		assert.Empty(t, b.errors, "console errors and uncaught exceptions of the page")
		t.Logf("console: screenshots in %s", shots)
	})
	return b
}

func (b *browser) record(m chromedp.ConsoleMessage) {
	if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException && m.Type != "assert" {
		if m.Type == chromedp.ConsoleWarning {
			b.t.Logf("console warning: %s (%s)", m.Text, m.URL)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Chromium aborts requests in flight when the host's addresses change
	// (net::ERR_NETWORK_CHANGED); other tests add bridges and nodes while
	// this one runs. That is the host's doing, not the page's: the SDK
	// retries the request, and the assertions on what the page shows judge
	// whether it recovered.
	if m.Source == "network" && strings.Contains(m.Text, "net::ERR_NETWORK_CHANGED") {
		b.t.Logf("console: the host's network changed under a request: %s (%s)", m.Text, m.URL)
		return
	}
	if m.Source == "network" {
		for _, e := range b.expected {
			if strings.Contains(m.URL, e.path) && strings.Contains(m.Text, fmt.Sprintf("status of %d", e.status)) {
				b.t.Logf("console: expected %s (%s)", m.Text, m.URL)
				return
			}
		}
	}
	text := m.String()
	if m.URL != "" {
		text += " (" + m.URL + ")"
	}
	b.errors = append(b.errors, text)
	b.t.Errorf("console: %s", text)
}

// expectHTTPError lets the page's requests to paths containing path answer
// status without failing the test, from now on.
func (b *browser) expectHTTPError(path string, status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expected = append(b.expected, expectedError{path, status})
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	require.NoError(b.t, chromedp.Do(c, actions...))
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](expr))
	require.NoError(b.t, err, "evaluate %s", expr)
	switch v := v.(type) {
	case string:
		return v
	default:
		j, _ := json.Marshal(v)
		return string(j)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(b.eval(`(document.querySelector(` + jsString(sel) + `) || {}).textContent || ""`))
}

// poll waits up to two minutes (a save or a start takes seconds) for the
// JavaScript predicate; on a timeout it takes a screenshot and fails with
// what.
func (b *browser) poll(predicate, what string) {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, 2*time.Minute+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(c, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(2*time.Minute)))
	if err != nil {
		b.shootOne("failure", 1280)
		b.t.Fatalf("waiting for %s: %v\npage: %s\nmain: %s", what, err, b.eval(`location.href`),
			b.eval(`(document.querySelector("main") || document.body).innerText.slice(0, 3000)`)+"\nterminal: "+b.eval(`JSON.stringify(`+terminalRows+`)`))
	}
}

func (b *browser) waitVisible(sel string) {
	b.t.Helper()
	b.poll(`(() => { const e = document.querySelector(`+jsString(sel)+`); return !!e && e.getClientRects().length > 0 })()`, sel+" to be visible")
}

func (b *browser) waitText(sel, substr string) {
	b.t.Helper()
	b.poll(`((document.querySelector(`+jsString(sel)+`) || {}).textContent || "").includes(`+jsString(substr)+`)`, fmt.Sprintf("%s to show %q", sel, substr))
}

func (b *browser) waitValue(sel, value string) {
	b.t.Helper()
	b.poll(`(document.querySelector(`+jsString(sel)+`) || {}).value === `+jsString(value), fmt.Sprintf("%s to hold %q", sel, value))
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	b.waitVisible("#token")
	b.eval(`document.querySelector("#token").value = ""`)
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin-form button[type=submit]")))
}

// typeInTerminal types into xterm.js's input element: text as a keyboard's
// input events insert it, "\r" as the Enter key. (Key events with a char
// event each, as chromedp.SendKeys makes them, reach xterm.js twice.)
func (b *browser) typeInTerminal(keys string) {
	b.t.Helper()
	b.do(chromedp.Focus(chromedp.CSS("#terminal textarea")))
	for i, part := range strings.Split(keys, "\r") {
		if i > 0 {
			b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
				for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
					p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
					if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
						return chromedp.Void{}, err
					}
				}
				return chromedp.Void{}, nil
			})
		}
		if part != "" {
			b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
				_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: part})
				return chromedp.Void{}, err
			})
		}
	}
}

// terminalRows are the lines the terminal shows (xterm.js's DOM rows).
const terminalRows = `Array.from(document.querySelectorAll("#terminal .xterm-rows > div")).map(d => d.textContent.replace(/\u00a0/g, " ").trimEnd())`

func (b *browser) waitTerminalRow(line string) {
	b.t.Helper()
	b.showTerminal()
	b.poll(terminalRows+`.some(r => r.trim() === `+jsString(line)+`)`, fmt.Sprintf("a terminal line %q", line))
}

// showTerminal scrolls the terminal into view: xterm.js does not render
// while it is out of view.
func (b *browser) showTerminal() {
	b.t.Helper()
	b.eval(`document.querySelector("#terminal").scrollIntoView({block: "nearest"}), ""`)
}

// waitPrompt waits for the shell's prompt ("/ # ") on the terminal's last
// written line: what is typed before the shell reads its terminal is lost.
func (b *browser) waitPrompt() {
	b.t.Helper()
	b.showTerminal()
	b.poll(terminalRows+`.filter(r => r.trim() !== "").pop()?.trim().endsWith("#") === true`, "the shell's prompt")
}

func (b *browser) terminalHasRow(f func(string) bool) bool {
	b.t.Helper()
	var rows []string
	require.NoError(b.t, json.Unmarshal([]byte(b.eval(`JSON.stringify(`+terminalRows+`)`)), &rows))
	for _, r := range rows {
		if f(r) {
			return true
		}
	}
	return false
}

// shoot writes screenshots of the whole page at 1280x800 and 400 px wide.
func (b *browser) shoot(name string) {
	b.t.Helper()
	b.shootOne(name, 1280)
	b.shootOne(name, 400)
	b.do(chromedp.EmulateViewport(1280, 800))
}

func (b *browser) shootOne(name string, width int64) {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(c, chromedp.EmulateViewport(width, 800), chromedp.Sleep(400*time.Millisecond)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.shots, fmt.Sprintf("%s-%d.png", name, width))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("console: screenshot %s", p)
}

func jsString(s string) string {
	j, _ := json.Marshal(s)
	return string(j)
}
