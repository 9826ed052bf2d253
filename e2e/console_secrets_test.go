package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// TestRootConsoleSecretsWebhooksEgress uses the console in headless
// Chromium as a tenant's admin would: see the egress refusals of a project
// (what `envctl egress log` shows), create a secret, bind it to a host over
// HTTPS, rotate it, unbind and revoke it (its value never shown back, on
// the page or in its fields), register a webhook (its signing secret shown
// once), send it a test event and see the delivery in its log, and remove
// it. What the page did is checked through the API as well.
func TestRootConsoleSecretsWebhooksEgress(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	tenant := fmt.Sprintf("console-sec-%d", projectSeq.Add(1))
	tok, err := env.c.CreateToken(ctx(t), tenant, types.CreateTokenRequest{Admin: true})
	require.NoError(t, err)
	tc, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)

	// A refusal of the egress gateway, made through the API.
	project := fmt.Sprintf("egcon-%d", projectSeq.Add(1))
	_, err = tc.CreateProject(ctx(t), types.CreateProjectRequest{Name: project, Base: fixtureBase, Egress: "allow:*.console-allowed.test"})
	require.NoError(t, err)
	in, err := tc.CreateInstance(ctx(t), project, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
	refused := fmt.Sprintf("refused-%d.console.test", projectSeq.Add(1))
	tenantSh(t, tc, in.ID, "nslookup "+refused+" || true")
	require.Eventually(t, func() bool {
		log, err := tc.EgressLog(ctx(t), project, 10)
		require.NoError(t, err)
		return len(log) > 0 && log[0].Name == refused
	}, 15*time.Second, 100*time.Millisecond, "the refusal is in the project's egress log")

	b.do(chromedp.Navigate(env.node.URL + "/console/"))
	b.signIn(tok.Token)
	b.waitText("#tenant", tenant)
	b.do(chromedp.Navigate(env.node.URL + "/console/#/projects/" + project))
	b.waitText("#page-title", "Project "+project)
	b.waitText("#egress-table", refused)
	b.waitText("#egress-table", in.ID)
	b.waitText("#egress-table", "dns")
	b.shoot("20-egress-refusals")

	// Secrets: create, bind over HTTPS, rotate, unbind, revoke.
	name := fmt.Sprintf("apikey%d", projectSeq.Add(1))
	one, two := "console-sk1-"+name, "console-sk2-"+name
	noValue := func(what string) {
		t.Helper()
		page := b.eval(`document.body.innerText + "\n" + [...document.querySelectorAll("input")].map((i) => i.value).join("\n")`)
		assert.NotContains(t, page, one, "%s: the page shows the value", what)
		assert.NotContains(t, page, two, "%s: the page shows the value", what)
	}
	b.do(chromedp.Click(chromedp.CSS("#nav-secrets")))
	b.waitText("#page-title", "Secrets")
	b.waitText("#secrets-table", "None.")
	b.do(chromedp.SendKeys(chromedp.CSS("#secret-name"), name), chromedp.SendKeys(chromedp.CSS("#secret-value"), one),
		chromedp.Click(chromedp.CSS("#secret-set-form button[type=submit]")))
	b.waitText("#secrets-flash", "Secret "+name+" saved")
	b.waitText("#secrets-table", name)
	b.waitText("#secrets-table", "not bound")
	noValue("after create")
	listed, err := tc.ListSecrets(ctx(t))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	created := listed[0]
	assert.Equal(t, name, created.Name)
	assert.Nil(t, created.Binding)

	b.do(chromedp.SendKeys(chromedp.CSS("#bind-name"), name), chromedp.SendKeys(chromedp.CSS("#bind-host"), "api.console-allowed.test"),
		chromedp.SetValue(chromedp.CSS("#bind-scheme"), "https"), chromedp.SendKeys(chromedp.CSS("#bind-header"), "X-Api-Key"),
		chromedp.SendKeys(chromedp.CSS("#bind-format"), "{{value}}"), chromedp.Click(chromedp.CSS("#secret-bind-form button[type=submit]")))
	b.waitText("#secrets-flash", "bound to https://api.console-allowed.test")
	b.waitText("#secrets-table", "api.console-allowed.test")
	b.waitText("#secrets-table", "X-Api-Key: {{value}}")
	listed, err = tc.ListSecrets(ctx(t))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.NotNil(t, listed[0].Binding)
	assert.Equal(t, types.SecretBinding{Host: "api.console-allowed.test", Header: "X-Api-Key", Format: "{{value}}", Scheme: "https"}, *listed[0].Binding)
	b.shoot("21-secrets")

	b.eval(`document.querySelector("#secret-name").value = ""`)
	b.do(chromedp.SendKeys(chromedp.CSS("#secret-name"), name), chromedp.SendKeys(chromedp.CSS("#secret-value"), two),
		chromedp.Click(chromedp.CSS("#secret-set-form button[type=submit]")))
	b.poll(`document.querySelector("#secret-value").value === ""`, "the value field to be emptied")
	require.Eventually(t, func() bool {
		listed, err = tc.ListSecrets(ctx(t))
		require.NoError(t, err)
		return len(listed) == 1 && listed[0].UpdatedAt.After(created.UpdatedAt)
	}, 10*time.Second, 100*time.Millisecond, "the rotation reached the store")
	assert.NotNil(t, listed[0].Binding, "a rotation keeps the binding")
	noValue("after rotation")

	// Clicked from the page itself: the table may be drawn again after the
	// rotation, and a node chromedp found before that would be gone.
	b.poll(`(() => { const e = document.querySelector("#secret-unbind-`+name+`"); if (!e) return false; e.click(); return true })()`, "the unbind button")
	b.waitText("#secrets-flash", "unbound")
	b.waitText("#secrets-table", "not bound")
	listed, err = tc.ListSecrets(ctx(t))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Nil(t, listed[0].Binding)

	b.do(chromedp.Click(chromedp.CSS("#secret-revoke-" + name)))
	b.waitText("#secrets-flash", "revoked")
	b.waitText("#secrets-table", "None.")
	listed, err = tc.ListSecrets(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, listed)

	// Webhooks: register, test, see the delivery, remove.
	var mu sync.Mutex
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	b.do(chromedp.Click(chromedp.CSS("#nav-webhooks")))
	b.waitText("#page-title", "Webhooks")
	b.waitText("#webhooks-table", "None.")
	b.do(chromedp.SendKeys(chromedp.CSS("#webhook-url"), recv.URL+"/hook"), chromedp.SendKeys(chromedp.CSS("#webhook-events"), "instance.*"),
		chromedp.SendKeys(chromedp.CSS("#webhook-description"), "console test"), chromedp.Click(chromedp.CSS("#webhook-form button[type=submit]")))
	b.waitVisible("#new-webhook-secret")
	hookSecret := b.eval(`document.querySelector("#new-webhook-secret").value`)
	assert.NotEmpty(t, hookSecret, "the signing secret is shown once")
	b.waitText("#webhooks-table", recv.URL+"/hook")
	hooks, err := tc.ListWebhooks(ctx(t))
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	hook := hooks[0]
	assert.Empty(t, hook.Secret, "the list never carries the secret")
	assert.Equal(t, []string{"instance.*"}, hook.Events)

	b.do(chromedp.Click(chromedp.CSS("#webhook-test-" + hook.ID)))
	b.waitText("#webhooks-flash", "queued")
	b.waitText("#deliveries-h", hook.ID)
	b.waitText("#deliveries-table", "delivered") // the log refreshes itself while a delivery is pending
	assert.Contains(t, b.text("#deliveries-table"), "webhook.test")
	assert.Contains(t, b.text("#deliveries-table"), "204")
	mu.Lock()
	require.NotEmpty(t, got, "the receiver got the event")
	assert.Contains(t, got[0], "webhook.test")
	mu.Unlock()
	b.shoot("22-webhooks")

	b.do(chromedp.Click(chromedp.CSS("#webhook-remove-" + hook.ID)))
	b.waitText("#webhooks-flash", "removed")
	b.waitText("#webhooks-table", "None.")
	hooks, err = tc.ListWebhooks(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, hooks)
}
