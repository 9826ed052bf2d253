package types

import "time"

// Webhook event types. A delivery's body is an Event (the type of an
// operation's event stream): seq is the tenant's event number, type one
// of these, data the payload named beside it.
const (
	// WebhookInstanceState: an instance was made or changed state; data is
	// the instance (id, project, node, version, generation, state, reason,
	// message, retain, created_at, last_transition_at).
	WebhookInstanceState = "instance.state"
	// WebhookOperationPrefix + kind ("operation.save", "operation.build",
	// "operation.migrate", ...): an operation ended; data is the Operation
	// (its result or error included).
	WebhookOperationPrefix = "operation."
	// WebhookQuotaRefused: an operation failed with quota_exceeded (sent
	// besides its operation.<kind>); data is the Operation.
	WebhookQuotaRefused = "quota.refused"
	// WebhookRolloutStep: a rollout moved one project of the tenant to a
	// new status; data {rollout, project, status, old_version,
	// new_version, message}.
	WebhookRolloutStep = "rollout.step"
	// WebhookTest: sent by POST /v1/webhooks/{id}/test to that hook only,
	// whatever it subscribes to.
	WebhookTest = "webhook.test"
	// WebhookAll subscribes to every type; "family.*" to a family.
	WebhookAll = "*"
)

// Headers of a delivery. The signature is
// "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)), timestamp the
// decimal Unix seconds of WebhookTimestampHeader (docs/api.md shows the
// check).
const (
	WebhookIDHeader        = "Envd-Webhook-Id"        // the delivery's id: the same on every try of it
	WebhookEventHeader     = "Envd-Webhook-Event"     // the event's type
	WebhookTimestampHeader = "Envd-Webhook-Timestamp" // Unix seconds of this try
	WebhookSignatureHeader = "Envd-Webhook-Signature" // v1=<hex>
	WebhookAttemptHeader   = "Envd-Webhook-Attempt"   // 1 on the first try
)

// WebhookRequest is the body of POST /v1/webhooks.
type WebhookRequest struct {
	URL string `json:"url"` // http or https
	// Events are the subscribed types: exact ("instance.state"), a
	// family ("operation.*") or "*"; empty = "*".
	Events      []string `json:"events,omitempty"`
	Description string   `json:"description,omitempty"`
}

// Webhook is a registered hook. Secret is set only in the answer of its
// creation: it signs every delivery and is never shown again.
type Webhook struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	Events      []string  `json:"events"`
	Description string    `json:"description,omitempty"`
	Secret      string    `json:"secret,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// Delivery states.
const (
	DeliveryPending   = "pending"   // not yet delivered; retried at next_attempt_at
	DeliveryDelivered = "delivered" // the receiver answered 2xx
	DeliveryFailed    = "failed"    // given up after the most attempts
)

// WebhookDelivery is one event sent (or to send) to a hook: an entry of
// GET /v1/webhooks/{id}/deliveries.
type WebhookDelivery struct {
	ID            int64      `json:"id"`
	Webhook       string     `json:"webhook"`
	Event         Event      `json:"event"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"` // while pending
	LastError     string     `json:"last_error,omitempty"`
	ResponseCode  int        `json:"response_code,omitempty"` // of the last try; 0 = no answer
	CreatedAt     time.Time  `json:"created_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}
