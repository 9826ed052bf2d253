package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// CreateWebhook registers a webhook of the caller's tenant: POST
// /v1/webhooks. The answer alone carries the hook's secret.
func (c *Client) CreateWebhook(ctx context.Context, req types.WebhookRequest) (types.Webhook, error) {
	return post[types.Webhook](ctx, c, http.MethodPost, "/v1/webhooks", req)
}

// ListWebhooks lists the caller's tenant's webhooks: GET /v1/webhooks.
func (c *Client) ListWebhooks(ctx context.Context) ([]types.Webhook, error) {
	return get[[]types.Webhook](ctx, c, "/v1/webhooks")
}

// DeleteWebhook removes a webhook and its delivery log: DELETE
// /v1/webhooks/{id}.
func (c *Client) DeleteWebhook(ctx context.Context, id string) (types.Webhook, error) {
	return post[types.Webhook](ctx, c, http.MethodDelete, "/v1/webhooks/"+esc(id), nil)
}

// TestWebhook queues a webhook.test event for one webhook: POST
// /v1/webhooks/{id}/test.
func (c *Client) TestWebhook(ctx context.Context, id string) (types.WebhookDelivery, error) {
	return post[types.WebhookDelivery](ctx, c, http.MethodPost, "/v1/webhooks/"+esc(id)+"/test", nil)
}

// WebhookDeliveries lists a webhook's newest deliveries, newest first: GET
// /v1/webhooks/{id}/deliveries.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) ([]types.WebhookDelivery, error) {
	return get[[]types.WebhookDelivery](ctx, c, "/v1/webhooks/"+esc(id)+"/deliveries")
}
