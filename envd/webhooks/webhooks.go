// Package webhooks is the tenants' webhooks: registering URLs
// (api.WebhookCore) and delivering the tenant's events to them, signed,
// in order per hook, retried with backoff (Hooks.Run).
//
// Events are recorded by database triggers (migrations/0035_webhooks.sql)
// in the transaction of the change they tell, with one delivery row per
// subscribed hook, so a delivery outlives a node restart and an event is
// never told for a change that rolled back. Every node runs the sender;
// a delivery is claimed with its row lock (versions.Webhooks.DeliverNext),
// so two nodes never send it at once. Delivery is at least once: a node
// that dies after the receiver answered but before its commit leaves the
// delivery pending, and another try sends it again with the same
// Envd-Webhook-Id.
package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Store is what webhooks need of the store (versions.Webhooks).
type Store interface {
	CreateWebhook(ctx context.Context, h versions.Webhook, max int) (versions.Webhook, error)
	ListWebhooks(ctx context.Context, tenant string) ([]versions.Webhook, error)
	DeleteWebhook(ctx context.Context, tenant, id string) (versions.Webhook, error)
	TestWebhook(ctx context.Context, tenant, id, typ, message string, data []byte) (versions.WebhookDelivery, error)
	WebhookDeliveries(ctx context.Context, tenant, id string, limit int) ([]versions.WebhookDelivery, error)
	DeliverNext(ctx context.Context, send func(ctx context.Context, c versions.Claimed) versions.Attempt) (bool, error)
}

// Config of the webhooks. Zero fields take the defaults named.
type Config struct {
	// AllowLoopback lets hooks reach loopback addresses (127.0.0.0/8,
	// ::1): for tests and receivers on the node itself. Default false.
	AllowLoopback bool
	// DenyNets are more networks no hook may reach, besides link-local
	// (the cloud metadata address included), unspecified and multicast
	// addresses, which are always refused: the node's instance subnets.
	DenyNets []netip.Prefix
	// Workers is how many deliveries a node sends at once; default 4.
	Workers int
	// Poll is how often an idle worker looks for due deliveries; default 1s.
	Poll time.Duration
	// BackoffBase is the wait after a first failed try, doubled after each
	// further one up to BackoffCap; defaults 2s and 10m.
	BackoffBase, BackoffCap time.Duration
	// MaxAttempts is the tries after which a delivery is given up (state
	// failed) and the hook's next one goes; default 15 (about 1.5 h of
	// retries with the default backoff).
	MaxAttempts int
	// Timeout bounds one try, connection to answer; default 10s.
	Timeout time.Duration
	// MaxHooks is how many hooks a tenant may have; default 20.
	MaxHooks int
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 2 * time.Second
	}
	if c.BackoffCap <= 0 {
		c.BackoffCap = 10 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 15
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxHooks <= 0 {
		c.MaxHooks = 20
	}
	return c
}

// Hooks serves the tenants' webhooks and sends their deliveries.
type Hooks struct {
	store  Store
	cfg    Config
	log    *slog.Logger
	client *http.Client
	wg     sync.WaitGroup
}

// New makes the webhooks' part; Run starts its senders.
func New(store Store, cfg Config, log *slog.Logger) *Hooks {
	h := &Hooks{store: store, cfg: cfg.withDefaults(), log: log}
	if h.log == nil {
		h.log = slog.Default()
	}
	dialer := &net.Dialer{Timeout: h.cfg.Timeout, Control: h.control}
	h.client = &http.Client{
		Timeout: h.cfg.Timeout,
		Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: nil, TLSHandshakeTimeout: h.cfg.Timeout,
			ResponseHeaderTimeout: h.cfg.Timeout, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second},
		// A redirect could lead to an address the hook may not reach; the
		// receiver answers where it was registered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h
}

// maxURL and maxDescription bound a WebhookRequest.
const (
	maxURL         = 2048
	maxDescription = 256
	maxDeliveries  = 100
)

// families are the event types a hook may subscribe to, by family; an
// entry "" means the family's exact types are open ("operation.<kind>").
var families = map[string][]string{
	"instance":  {types.WebhookInstanceState},
	"operation": nil,
	"quota":     {types.WebhookQuotaRefused},
	"rollout":   {types.WebhookRolloutStep},
}

// checkEvents validates a subscription list and returns it normalised:
// empty is ["*"].
func checkEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return []string{types.WebhookAll}, nil
	}
	var out []string
	for _, e := range events {
		e = strings.TrimSpace(e)
		fam, rest, _ := strings.Cut(e, ".")
		known, ok := families[fam]
		switch {
		case e == types.WebhookAll:
		case ok && rest == "*":
		case ok && fam == "operation" && validName(rest):
		case ok && slices.Contains(known, e):
		default:
			return nil, errdefs.WithDetails(fmt.Errorf("events: %q is not an event type (want instance.state, operation.<kind> such as operation.save, quota.refused, rollout.step, family.* or *): %w", e, errdefs.ErrInvalidArgument),
				map[string]any{"field": "events", "reason": "unknown_event"})
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// urlError is a refused URL: invalid_argument with details.field "url"
// and details.reason one of "scheme", "host", "address", "resolve".
func urlError(reason, format string, args ...any) error {
	return errdefs.WithDetails(fmt.Errorf("url: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...),
		map[string]any{"field": "url", "reason": reason})
}

// CheckURL validates a hook's URL: http or https with a host, no user
// information, and a host whose addresses (all of them, for a name) the
// hook may reach (checkAddr). The same address check runs again at every
// connection, so a name that resolves elsewhere later is refused then.
func (h *Hooks) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	if raw == "" || len(raw) > maxURL {
		return nil, urlError("scheme", "want an http or https URL of at most %d bytes", maxURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, urlError("scheme", "%q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, urlError("host", "%q has no host", raw)
	}
	if u.User != nil {
		return nil, urlError("host", "user information in the URL is not supported: the signature authenticates envd")
	}
	if u.Fragment != "" {
		return nil, urlError("host", "%q: a fragment is not sent", raw)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := h.checkAddr(ip); err != nil {
			return nil, urlError("address", "%s: %v", host, err)
		}
		return u, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, urlError("resolve", "host %q does not resolve", host)
	}
	for _, ip := range addrs {
		if err := h.checkAddr(ip); err != nil {
			return nil, urlError("address", "host %q resolves to %s: %v", host, ip, err)
		}
	}
	return u, nil
}

// checkAddr refuses the addresses a hook may not reach: unspecified,
// multicast, link-local (169.254.0.0/16 with the cloud metadata address,
// fe80::/10), the metadata addresses of IPv6 clouds, the instance subnets
// (DenyNets), and loopback unless AllowLoopback. Private ranges are
// allowed: receivers of an on-premises cluster live there.
func (h *Hooks) checkAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return fmt.Errorf("unspecified address")
	case ip.IsLoopback():
		if !h.cfg.AllowLoopback {
			return fmt.Errorf("loopback addresses are refused (the node's --webhooks-allow-loopback allows them)")
		}
		return nil
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("link-local addresses (the cloud metadata service among them) are refused")
	case ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("multicast and broadcast addresses are refused")
	case ip == netip.MustParseAddr("fd00:ec2::254"):
		return fmt.Errorf("the cloud metadata address is refused")
	}
	for _, n := range h.cfg.DenyNets {
		if n.Contains(ip) {
			return fmt.Errorf("instance addresses (%s) are refused", n)
		}
	}
	return nil
}

// control refuses a connection to an address checkAddr refuses, whatever
// the name resolved to when the hook was registered.
func (h *Hooks) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook address %q: %w", address, err)
	}
	if err := h.checkAddr(ap.Addr()); err != nil {
		return fmt.Errorf("webhook address %s: %v", ap.Addr(), err)
	}
	return nil
}

// CreateWebhook registers a hook of the caller's tenant and returns it
// with its secret, which no later answer shows.
func (h *Hooks) CreateWebhook(ctx context.Context, p types.Principal, req types.WebhookRequest) (types.Webhook, error) {
	u, err := h.CheckURL(ctx, strings.TrimSpace(req.URL))
	if err != nil {
		return types.Webhook{}, err
	}
	events, err := checkEvents(req.Events)
	if err != nil {
		return types.Webhook{}, err
	}
	if len(req.Description) > maxDescription {
		return types.Webhook{}, fmt.Errorf("description: at most %d bytes: %w", maxDescription, errdefs.ErrInvalidArgument)
	}
	hook, err := h.store.CreateWebhook(ctx, versions.Webhook{ID: "wh_" + randomHex(12), Tenant: p.Tenant, URL: u.String(), Events: events,
		Secret: "whsec_" + randomHex(32), Description: req.Description}, h.cfg.MaxHooks)
	if err != nil {
		return types.Webhook{}, err
	}
	out := wire(hook)
	out.Secret = hook.Secret
	return out, nil
}

// ListWebhooks lists the caller's tenant's hooks, without secrets.
func (h *Hooks) ListWebhooks(ctx context.Context, p types.Principal) ([]types.Webhook, error) {
	hooks, err := h.store.ListWebhooks(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]types.Webhook, len(hooks))
	for i, hk := range hooks {
		out[i] = wire(hk)
	}
	return out, nil
}

// DeleteWebhook removes a hook of the caller's tenant and its deliveries.
func (h *Hooks) DeleteWebhook(ctx context.Context, p types.Principal, id string) (types.Webhook, error) {
	hook, err := h.store.DeleteWebhook(ctx, p.Tenant, id)
	return wire(hook), err
}

// TestWebhook queues a webhook.test event for one hook of the caller's
// tenant and returns its delivery (pending: the senders deliver it as any
// other, after the hook's earlier ones).
func (h *Hooks) TestWebhook(ctx context.Context, p types.Principal, id string) (types.WebhookDelivery, error) {
	data, _ := json.Marshal(map[string]string{"webhook": id})
	d, err := h.store.TestWebhook(ctx, p.Tenant, id, types.WebhookTest, "test event of webhook "+id, data)
	if err != nil {
		return types.WebhookDelivery{}, err
	}
	return wireDelivery(d), nil
}

// WebhookDeliveries lists a hook's newest deliveries (at most 100), newest
// first.
func (h *Hooks) WebhookDeliveries(ctx context.Context, p types.Principal, id string) ([]types.WebhookDelivery, error) {
	ds, err := h.store.WebhookDeliveries(ctx, p.Tenant, id, maxDeliveries)
	if err != nil {
		return nil, err
	}
	out := make([]types.WebhookDelivery, len(ds))
	for i, d := range ds {
		out[i] = wireDelivery(d)
	}
	return out, nil
}

func wire(h versions.Webhook) types.Webhook {
	return types.Webhook{ID: h.ID, URL: h.URL, Events: h.Events, Description: h.Description, CreatedAt: h.CreatedAt}
}

func wireDelivery(d versions.WebhookDelivery) types.WebhookDelivery {
	out := types.WebhookDelivery{ID: d.ID, Webhook: d.Hook, Event: event(d), State: d.State, Attempts: d.Attempts,
		LastError: d.LastError, ResponseCode: d.ResponseCode, CreatedAt: d.CreatedAt, FinishedAt: d.FinishedAt}
	if d.State == versions.DeliveryPending {
		t := d.NextAttemptAt
		out.NextAttemptAt = &t
	}
	return out
}

// event is the body of a delivery: the event as the event stream's type.
func event(d versions.WebhookDelivery) types.Event {
	return types.Event{Seq: int(d.EventID), At: d.EventAt, Type: d.EventType, Message: d.EventMessage, Data: d.EventData}
}

// Run starts the senders; they stop when ctx ends (Wait waits for them).
func (h *Hooks) Run(ctx context.Context) {
	for range h.cfg.Workers {
		h.wg.Go(func() { h.work(ctx) })
	}
}

// Wait waits for the senders Run started to stop.
func (h *Hooks) Wait() { h.wg.Wait() }

func (h *Hooks) work(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Send while there is something due; then sleep a poll.
		for ctx.Err() == nil {
			sent, err := h.store.DeliverNext(ctx, h.send)
			if err != nil && ctx.Err() == nil {
				h.log.Warn("webhook delivery", "err", err)
			}
			if !sent || err != nil {
				break
			}
		}
		t.Reset(h.cfg.Poll)
	}
}

// send makes one try of c and says what came of it: delivered on a 2xx
// answer; otherwise retried after the backoff, or given up after
// MaxAttempts tries.
func (h *Hooks) send(ctx context.Context, c versions.Claimed) versions.Attempt {
	attempt := c.Attempts + 1
	code, err := h.post(ctx, c, attempt)
	if err == nil {
		return versions.Attempt{Delivered: true, ResponseCode: code}
	}
	a := versions.Attempt{ResponseCode: code, Error: err.Error(), RetryIn: h.backoff(attempt), GiveUp: attempt >= h.cfg.MaxAttempts}
	h.log.Info("webhook delivery failed", "webhook", c.Hook, "delivery", c.ID, "attempt", attempt, "err", err, "retry_in", a.RetryIn, "give_up", a.GiveUp)
	return a
}

// backoff is the wait after the attempt-th failed try: BackoffBase doubled
// per earlier failure, at most BackoffCap.
func (h *Hooks) backoff(attempt int) time.Duration {
	d := h.cfg.BackoffBase
	for i := 1; i < attempt && d < h.cfg.BackoffCap; i++ {
		d *= 2
	}
	return min(d, h.cfg.BackoffCap)
}

// maxErrorBody is how much of a refusing answer's body the delivery log
// keeps.
const maxErrorBody = 256

func (h *Hooks) post(ctx context.Context, c versions.Claimed, attempt int) (int, error) {
	body, err := json.Marshal(event(c.WebhookDelivery))
	if err != nil {
		return 0, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "envd-webhooks")
	req.Header.Set(types.WebhookIDHeader, strconv.FormatInt(c.ID, 10))
	req.Header.Set(types.WebhookEventHeader, c.EventType)
	req.Header.Set(types.WebhookTimestampHeader, ts)
	req.Header.Set(types.WebhookSignatureHeader, Sign(c.Secret, ts, body))
	req.Header.Set(types.WebhookAttemptHeader, strconv.Itoa(attempt))
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp.StatusCode, nil
}

// Sign is a delivery's signature header value: "v1=" and the hex
// HMAC-SHA256 of timestamp + "." + body under secret.
func Sign(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte("."))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
