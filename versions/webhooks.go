package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/envd-dev/envd/errdefs"
)

// Terms of webhooks (migrations/0035_webhooks.sql):
//   - hook: a tenant's URL, the event types it subscribes to and the secret
//     its deliveries are signed with.
//   - event: one fact of a tenant (an instance changed state, an operation
//     ended, a rollout moved a project), recorded by a trigger in the
//     transaction that made the change; its id orders the tenant's events.
//   - delivery: one event to send to one hook. A hook's deliveries go out
//     in id order: one waits while an earlier one of its hook is pending.

// Webhook is a tenant's registered hook.
type Webhook struct {
	ID          string
	Tenant      string
	URL         string
	Events      []string // subscribed types; "*" = all
	Secret      string
	Description string
	CreatedAt   time.Time
}

var webhookColumns = columns[Webhook]{
	{"id", func(h *Webhook) any { return &h.ID }},
	{"tenant_id", func(h *Webhook) any { return &h.Tenant }},
	{"url", func(h *Webhook) any { return &h.URL }},
	{"events", func(h *Webhook) any { return &h.Events }},
	{"secret", func(h *Webhook) any { return &h.Secret }},
	{"description", func(h *Webhook) any { return &h.Description }},
	{"created_at", func(h *Webhook) any { return &h.CreatedAt }},
}

var webhookCols = webhookColumns.list()

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // given up
)

// WebhookDelivery is one event sent (or to send) to one hook, with the
// event it carries.
type WebhookDelivery struct {
	ID            int64
	Hook          string
	State         string
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	ResponseCode  int
	CreatedAt     time.Time
	FinishedAt    *time.Time

	EventID      int64
	EventType    string
	EventMessage string
	EventData    []byte // JSON
	EventAt      time.Time
}

var deliveryColumns = columns[WebhookDelivery]{
	{"d.id", func(d *WebhookDelivery) any { return &d.ID }},
	{"d.hook_id", func(d *WebhookDelivery) any { return &d.Hook }},
	{"d.state", func(d *WebhookDelivery) any { return &d.State }},
	{"d.attempts", func(d *WebhookDelivery) any { return &d.Attempts }},
	{"d.next_attempt_at", func(d *WebhookDelivery) any { return &d.NextAttemptAt }},
	{"d.last_error", func(d *WebhookDelivery) any { return &d.LastError }},
	{"d.response_code", func(d *WebhookDelivery) any { return &d.ResponseCode }},
	{"d.created_at", func(d *WebhookDelivery) any { return &d.CreatedAt }},
	{"d.finished_at", func(d *WebhookDelivery) any { return &d.FinishedAt }},
	{"e.id", func(d *WebhookDelivery) any { return &d.EventID }},
	{"e.type", func(d *WebhookDelivery) any { return &d.EventType }},
	{"e.message", func(d *WebhookDelivery) any { return &d.EventMessage }},
	{"e.data", func(d *WebhookDelivery) any { return &d.EventData }},
	{"e.at", func(d *WebhookDelivery) any { return &d.EventAt }},
}

var deliveryCols = deliveryColumns.list()

// CreateWebhook records h (ID, Tenant, URL, Events, Secret, Description)
// and returns it with its creation time. A tenant with max hooks already
// is ErrFailedPrecondition; an id in use is ErrAlreadyExists.
func (s Webhooks) CreateWebhook(ctx context.Context, h Webhook, max int) (Webhook, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (Webhook, error) {
		if err := ensureTenant(ctx, tx, h.Tenant); err != nil {
			return Webhook{}, err
		}
		// The tenant's row lock serialises two creations racing past max.
		if _, err := tx.Exec(ctx, "SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", h.Tenant); err != nil {
			return Webhook{}, translate(err, "tenant")
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM webhooks WHERE tenant_id = $1", h.Tenant).Scan(&n); err != nil {
			return Webhook{}, translate(err, "webhooks")
		}
		if max > 0 && n >= max {
			return Webhook{}, fmt.Errorf("tenant %q has %d webhooks, the most allowed: remove one first: %w", h.Tenant, n, errdefs.ErrFailedPrecondition)
		}
		out, err := webhookColumns.scan(tx.QueryRow(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, description)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+webhookCols, h.ID, h.Tenant, h.URL, h.Events, h.Secret, h.Description))
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" {
			return Webhook{}, fmt.Errorf("webhook %s: %w", h.ID, errdefs.ErrAlreadyExists)
		}
		return out, translate(err, "webhook "+h.ID)
	})
}

// ListWebhooks lists tenant's hooks, oldest first.
func (s Webhooks) ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error) {
	rows, err := s.db.Query(ctx, "SELECT "+webhookCols+" FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id", tenant)
	if err != nil {
		return nil, translate(err, "webhooks")
	}
	hooks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Webhook, error) { return webhookColumns.scan(r) })
	return hooks, translate(err, "webhooks")
}

// GetWebhook returns tenant's hook id; another tenant's is ErrNotFound.
func (s Webhooks) GetWebhook(ctx context.Context, tenant, id string) (Webhook, error) {
	h, err := webhookColumns.scan(s.db.QueryRow(ctx, "SELECT "+webhookCols+" FROM webhooks WHERE tenant_id = $1 AND id = $2", tenant, id))
	return h, translate(err, "webhook "+id)
}

// DeleteWebhook removes tenant's hook id with its deliveries and returns
// it; another tenant's is ErrNotFound. A delivery being sent finishes
// first (the delete waits for its row lock).
func (s Webhooks) DeleteWebhook(ctx context.Context, tenant, id string) (Webhook, error) {
	h, err := webhookColumns.scan(s.db.QueryRow(ctx, "DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2 RETURNING "+webhookCols, tenant, id))
	return h, translate(err, "webhook "+id)
}

// TestWebhook records an event of type typ for tenant's hook id alone
// (not for the tenant's other hooks) and returns its delivery.
func (s Webhooks) TestWebhook(ctx context.Context, tenant, id, typ, message string, data []byte) (WebhookDelivery, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (WebhookDelivery, error) {
		var did int64
		err := tx.QueryRow(ctx, `WITH h AS (SELECT id FROM webhooks WHERE tenant_id = $1 AND id = $2),
			e AS (INSERT INTO webhook_events (tenant_id, type, message, data) SELECT $1, $3, $4, $5 FROM h RETURNING id)
			INSERT INTO webhook_deliveries (hook_id, event_id) SELECT h.id, e.id FROM h, e RETURNING id`,
			tenant, id, typ, message, data).Scan(&did)
		if err != nil {
			return WebhookDelivery{}, translate(err, "webhook "+id)
		}
		return deliveryColumns.scan(tx.QueryRow(ctx, "SELECT "+deliveryCols+` FROM webhook_deliveries d
			JOIN webhook_events e ON e.id = d.event_id WHERE d.id = $1`, did))
	})
}

// WebhookDeliveries lists the newest limit deliveries of tenant's hook id,
// newest first; another tenant's hook is ErrNotFound.
func (s Webhooks) WebhookDeliveries(ctx context.Context, tenant, id string, limit int) ([]WebhookDelivery, error) {
	if _, err := s.GetWebhook(ctx, tenant, id); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, "SELECT "+deliveryCols+` FROM webhook_deliveries d
		JOIN webhook_events e ON e.id = d.event_id WHERE d.hook_id = $1 ORDER BY d.id DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, translate(err, "webhook deliveries")
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookDelivery, error) { return deliveryColumns.scan(r) })
	return ds, translate(err, "webhook deliveries")
}

// Claimed is a delivery due now, with the hook it goes to.
type Claimed struct {
	WebhookDelivery
	URL    string
	Secret string
}

// Attempt is the outcome of one try of a delivery.
type Attempt struct {
	Delivered    bool
	ResponseCode int           // 0 = no answer
	Error        string        // why it failed; "" when delivered
	RetryIn      time.Duration // when not delivered: the wait before the next try
	GiveUp       bool          // when not delivered: no more tries (state failed)
}

// DeliverNext claims the oldest due delivery that is the first pending one
// of its hook, calls send with it and records send's Attempt, all in one
// transaction that holds the delivery's row lock: a delivery claimed on
// one node is skipped by every other (SKIP LOCKED), and the hook's next
// delivery is not the first pending one until this one is delivered or
// given up, so a hook's deliveries go out one at a time, in order. It
// reports whether there was a delivery to send.
func (s Webhooks) DeliverNext(ctx context.Context, send func(ctx context.Context, c Claimed) Attempt) (bool, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (bool, error) {
		var c Claimed
		dest := []any{&c.URL, &c.Secret}
		for _, col := range deliveryColumns {
			dest = append(dest, col.into(&c.WebhookDelivery))
		}
		// The outer state test is rechecked on the locked row: a delivery
		// another node finished since this statement's snapshot is passed
		// over, not sent again.
		err := tx.QueryRow(ctx, `SELECT h.url, h.secret, `+deliveryCols+` FROM webhook_deliveries d
			JOIN (SELECT DISTINCT ON (hook_id) id FROM webhook_deliveries WHERE state = 'pending' ORDER BY hook_id, id) head ON head.id = d.id
			JOIN webhooks h ON h.id = d.hook_id
			JOIN webhook_events e ON e.id = d.event_id
			WHERE d.state = 'pending' AND d.next_attempt_at <= clock_timestamp()
			ORDER BY d.next_attempt_at, d.id LIMIT 1
			FOR UPDATE OF d SKIP LOCKED`).Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, translate(err, "claim webhook delivery")
		}
		a := send(ctx, c)
		state, finished := DeliveryPending, false
		switch {
		case a.Delivered:
			state, finished = DeliveryDelivered, true
		case a.GiveUp:
			state, finished = DeliveryFailed, true
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_deliveries SET state = $2, attempts = attempts + 1, response_code = $3, last_error = $4,
			next_attempt_at = clock_timestamp() + make_interval(secs => $5), finished_at = CASE WHEN $6 THEN clock_timestamp() END
			WHERE id = $1`, c.ID, state, a.ResponseCode, a.Error, a.RetryIn.Seconds(), finished)
		return true, translate(err, fmt.Sprintf("webhook delivery %d", c.ID))
	})
}
