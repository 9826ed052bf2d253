package versions

import "github.com/jackc/pgx/v5/pgxpool"

// The aggregates. Each is a small value on one executor (DB): the pool
// when taken from a Store, one transaction when taken from a Tx. Their
// methods' contracts are on the methods, in the file of their tables.

// Projects is projects and their settings: spec, prefetch list, idle,
// retention, network, public ports, warm-pool size, validation commands,
// checkpoint schedule (projects.go, idle.go, retention.go, network.go,
// ports.go, pools.go, autocheckpoint.go, rollouts.go).
type Projects struct{ db DB }

// Versions is a project's numbered versions and its current pointer, with
// what is recorded on versions: builds, checkpoints, squashes, retention's
// collection (projects.go, builds.go, checkpoints.go, squash.go,
// retention.go, specs.go).
type Versions struct{ db DB }

// Instances is instances, their states and generations, expiry, activity,
// warm pools, checkpoint state and placement (instances.go, idle.go,
// pools.go, autocheckpoint.go, ports.go, membership.go).
type Instances struct{ db DB }

// Operations is operations, their event logs and idempotency keys
// (operations.go, exclusive.go, idemkey.go, idempotency.go).
type Operations struct{ db DB }

// Volumes is volume archives and the node that holds a project's volumes
// (archives.go, membership.go).
type Volumes struct{ db DB }

// Access is API tokens and SSH keys (tokens.go, sshkeys.go).
type Access struct{ db DB }

// Tenants is per-tenant quotas, usage and maxima (quota.go, limits.go,
// idle.go).
type Tenants struct{ db DB }

// Nodes is the cluster: nodes, membership and leases, join tokens,
// database roles, cluster keys, which node caches which image
// (membership.go, nodes.go, noderoles.go, jointokens.go, clusterkey.go,
// ports.go).
type Nodes struct{ db DB }

// Rollouts is base-image rollouts and their projects (rollouts.go).
type Rollouts struct{ db DB }

// Webhooks is tenants' webhooks, their events and deliveries
// (webhooks.go).
type Webhooks struct{ db DB }

// Content is what owns registry content: imported images, upload leases
// and sweeps (images.go, uploads.go, gc.go). Leases and sweeps use
// connections of their own outside pool (uploads.go), never db.
type Content struct {
	db    DB
	pool  *pgxpool.Pool
	conns *lockConnPool
}
