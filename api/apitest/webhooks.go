package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Webhooks is the fake WebhookCore.
type Webhooks struct{ *Recorder }

// CreateWebhook answers the hook as asked, id wh_1, with a secret.
func (c *Webhooks) CreateWebhook(ctx context.Context, p types.Principal, req types.WebhookRequest) (types.Webhook, error) {
	return echo(c, "CreateWebhook", p, types.Webhook{ID: "wh_1", URL: req.URL, Events: req.Events, Description: req.Description, Secret: "whsec_test", CreatedAt: Epoch}, req)
}

// ListWebhooks answers no hooks.
func (c *Webhooks) ListWebhooks(ctx context.Context, p types.Principal) ([]types.Webhook, error) {
	return echo(c, "ListWebhooks", p, []types.Webhook{})
}

// DeleteWebhook answers hook id.
func (c *Webhooks) DeleteWebhook(ctx context.Context, p types.Principal, id string) (types.Webhook, error) {
	return echo(c, "DeleteWebhook", p, types.Webhook{ID: id, URL: "https://hooks.example/", Events: []string{"*"}, CreatedAt: Epoch}, id)
}

// TestWebhook answers a pending test delivery of hook id.
func (c *Webhooks) TestWebhook(ctx context.Context, p types.Principal, id string) (types.WebhookDelivery, error) {
	return echo(c, "TestWebhook", p, types.WebhookDelivery{ID: 1, Webhook: id, Event: types.Event{Seq: 1, At: Epoch, Type: types.WebhookTest}, State: types.DeliveryPending, CreatedAt: Epoch}, id)
}

// WebhookDeliveries answers no deliveries.
func (c *Webhooks) WebhookDeliveries(ctx context.Context, p types.Principal, id string) ([]types.WebhookDelivery, error) {
	return echo(c, "WebhookDeliveries", p, []types.WebhookDelivery{}, id)
}
