package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// Webhooks: the caller's tenant's hooks (/v1/webhooks) and their delivery
// logs. Any token of a tenant manages its tenant's hooks; a hook gets only
// its tenant's events.

// WebhookCore manages the tenant's webhooks.
type WebhookCore interface {
	// CreateWebhook registers a hook; a URL the node refuses to reach is
	// ErrInvalidArgument with details.field "url" and details.reason
	// (scheme, host, address, resolve). The answer alone carries the
	// secret.
	CreateWebhook(ctx context.Context, p types.Principal, req types.WebhookRequest) (types.Webhook, error)
	ListWebhooks(ctx context.Context, p types.Principal) ([]types.Webhook, error)
	// DeleteWebhook removes hook id of the caller's tenant and its
	// delivery log.
	DeleteWebhook(ctx context.Context, p types.Principal, id string) (types.Webhook, error)
	// TestWebhook queues a webhook.test event for hook id alone.
	TestWebhook(ctx context.Context, p types.Principal, id string) (types.WebhookDelivery, error)
	// WebhookDeliveries is hook id's newest deliveries, newest first.
	WebhookDeliveries(ctx context.Context, p types.Principal, id string) ([]types.WebhookDelivery, error)
}

type webhooks struct{ core WebhookCore }

func (g webhooks) routes() []route {
	return []route{
		{http.MethodPost, "/webhooks", handle(http.StatusCreated, func(r in, req types.WebhookRequest) (types.Webhook, error) {
			return g.core.CreateWebhook(r.ctx, r.p, req)
		})},
		{http.MethodGet, "/webhooks", handle(http.StatusOK, func(r in, _ none) ([]types.Webhook, error) {
			return items(g.core.ListWebhooks(r.ctx, r.p))
		})},
		{http.MethodDelete, "/webhooks/:id", handle(http.StatusOK, func(r in, _ none) (types.Webhook, error) {
			return g.core.DeleteWebhook(r.ctx, r.p, r.param("id"))
		})},
		{http.MethodPost, "/webhooks/:id/test", handle(http.StatusAccepted, func(r in, _ none) (types.WebhookDelivery, error) {
			return g.core.TestWebhook(r.ctx, r.p, r.param("id"))
		})},
		{http.MethodGet, "/webhooks/:id/deliveries", handle(http.StatusOK, func(r in, _ none) ([]types.WebhookDelivery, error) {
			return items(g.core.WebhookDeliveries(r.ctx, r.p, r.param("id")))
		})},
	}
}
