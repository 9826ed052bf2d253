package envd

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/envd-dev/envd/versions"
)

// The egress proxy asks SecretHeaders for every plain HTTP request and
// every TLS connection of an instance whose policy names hosts. Asking the
// database each time (the project's tenant, then its bound secrets) put
// two queries on each request's path, also for tenants with no binding at
// all. secretCache keeps both answers in memory (the sealed rows: values
// are opened per request, so no secret is kept in clear) and drops them
// when they change:
//
//   - every change of a tenant's secrets row and every removal of a
//     project notifies channel secretsChannel at commit (migration 0040:
//     triggers, so no writer can forget it), and the node's listener drops
//     that tenant's rows (or that project's tenant) when the notification
//     comes: this node's writes and every other node's alike;
//   - this node's own writes also drop the tenant at once
//     (Service.SetSecret and co.), so the request after the answer never
//     waits for the notification's round trip;
//   - a fill records the tenant's generation before its query and stores
//     the answer only if no notification came in between: a query that
//     read before a commit whose notification arrived during the query is
//     never kept;
//   - while the listener is not connected (before its first LISTEN, after
//     a lost connection until it listens again) nothing is read from or
//     stored in the cache: every lookup asks the database, as before.
//     A reconnect empties the cache (notifications of the gap are lost).
//
// So a rotation, a revocation or a binding change is seen by the next
// request on this node, and on another node once its listener has the
// notification (sent at commit; milliseconds on one network).
type secretCache struct {
	mu       sync.Mutex
	live     bool // the listener is LISTENing: the cache may be used
	epoch    uint64
	gens     map[string]uint64 // tenant -> changes seen (since the epoch)
	secrets  map[string][]versions.Secret
	projects map[int64]string // project id -> tenant
}

// secretsChannel is the channel of migration 0040's triggers.
const secretsChannel = "envd_secrets"

// maxCachedTenants bounds the cache; past it, it starts empty again.
const maxCachedTenants = 10000

func newSecretCache() *secretCache {
	return &secretCache{gens: map[string]uint64{}, secrets: map[string][]versions.Secret{}, projects: map[int64]string{}}
}

// stamp identifies the state a fill starts from: a fill stores only if the
// stamp is unchanged when it ends.
type stamp struct {
	ok    bool
	epoch uint64
	gen   uint64
}

// tenantOf returns project id's cached tenant, or a stamp to fill it with.
func (c *secretCache) tenantOf(id int64) (string, bool, stamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return "", false, stamp{}
	}
	t, ok := c.projects[id]
	return t, ok, stamp{ok: true, epoch: c.epoch, gen: c.gens["p:"+strconv.FormatInt(id, 10)]}
}

func (c *secretCache) putTenant(id int64, tenant string, st stamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !st.ok || !c.live || st.epoch != c.epoch || st.gen != c.gens["p:"+strconv.FormatInt(id, 10)] {
		return
	}
	if len(c.projects) >= maxCachedTenants {
		c.projects = map[int64]string{}
	}
	c.projects[id] = tenant
}

// boundSecrets returns tenant's cached bound secrets (nil and true: none),
// or a stamp to fill them with.
func (c *secretCache) boundSecrets(tenant string) ([]versions.Secret, bool, stamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return nil, false, stamp{}
	}
	rows, ok := c.secrets[tenant]
	return rows, ok, stamp{ok: true, epoch: c.epoch, gen: c.gens["t:"+tenant]}
}

func (c *secretCache) putSecrets(tenant string, rows []versions.Secret, st stamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !st.ok || !c.live || st.epoch != c.epoch || st.gen != c.gens["t:"+tenant] {
		return
	}
	if len(c.secrets) >= maxCachedTenants {
		c.secrets = map[string][]versions.Secret{}
	}
	c.secrets[tenant] = rows
}

// changed drops what a notification names: "t:TENANT" or "p:PROJECT_ID".
// Anything else empties the cache.
func (c *secretCache) changed(payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gens[payload]++
	switch {
	case strings.HasPrefix(payload, "t:"):
		delete(c.secrets, payload[2:])
	case strings.HasPrefix(payload, "p:"):
		if id, err := strconv.ParseInt(payload[2:], 10, 64); err == nil {
			delete(c.projects, id)
			return
		}
		c.reset()
	default:
		c.reset()
	}
	if len(c.gens) >= 4*maxCachedTenants {
		c.reset()
	}
}

// setLive turns the cache on (listening) or off, emptying it either way.
func (c *secretCache) setLive(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = live
	c.reset()
}

func (c *secretCache) reset() {
	c.epoch++
	c.gens = map[string]uint64{}
	c.secrets = map[string][]versions.Secret{}
	c.projects = map[int64]string{}
}

// listen keeps a connection of its own (not one of the pool's) LISTENing
// on secretsChannel until ctx ends, feeding the cache; it reconnects after
// retry when the connection is lost.
func (c *secretCache) listen(ctx context.Context, pool *pgxpool.Pool, retry time.Duration, log interface {
	Warn(msg string, args ...any)
}) {
	for ctx.Err() == nil {
		err := c.listenOnce(ctx, pool)
		c.setLive(false)
		if ctx.Err() != nil {
			return
		}
		log.Warn("egress secret cache: listener lost; every lookup asks the database until it listens again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (c *secretCache) listenOnce(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+secretsChannel); err != nil {
		return err
	}
	// Live only once LISTEN is in: changes committed from here on are
	// notified; what was cached before is gone (setLive empties).
	c.setLive(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c.changed(n.Payload)
	}
}
