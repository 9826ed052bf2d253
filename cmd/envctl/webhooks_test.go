package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// envctl webhook: add shows the secret once and sends the events asked;
// the other verbs reach their routes.
func TestWebhookCommands(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "webhook", "add", "https://hooks.example/h", "--events", "instance.state,operation.*", "--description", "ci")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "secret: whsec_test")
	call, ok := core.LastCall("CreateWebhook")
	require.True(t, ok)
	assert.Equal(t, []any{types.WebhookRequest{URL: "https://hooks.example/h", Events: []string{"instance.state", "operation.*"}, Description: "ci"}}, call.Args)

	r = envctl(t, env, nil, "-o", "json", "webhook", "add", "https://hooks.example/h")
	require.Equal(t, 0, r.code, r.stderr)
	var h types.Webhook
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &h), r.stdout)
	assert.Equal(t, "whsec_test", h.Secret)

	for _, tc := range []struct {
		args   []string
		method string
		want   []any
	}{
		{[]string{"webhook"}, "ListWebhooks", nil},
		{[]string{"webhook", "list"}, "ListWebhooks", nil},
		{[]string{"webhook", "rm", "wh_1"}, "DeleteWebhook", []any{"wh_1"}},
		{[]string{"webhook", "test", "wh_1"}, "TestWebhook", []any{"wh_1"}},
		{[]string{"webhook", "deliveries", "wh_1"}, "WebhookDeliveries", []any{"wh_1"}},
	} {
		r := envctl(t, env, nil, tc.args...)
		require.Equal(t, 0, r.code, "%v: %s", tc.args, r.stderr)
		call, ok := core.LastCall(tc.method)
		require.True(t, ok, tc.args)
		if tc.want != nil {
			assert.Equal(t, tc.want, call.Args, tc.args)
		}
		assert.NotEmpty(t, strings.TrimSpace(r.stdout), tc.args)
	}
}
