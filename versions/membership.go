package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Node states (nodes.state). A node places instances only when ready.
const (
	NodeReady    = "ready"
	NodeCordoned = "cordoned" // no new placements; what runs stays
	NodeDraining = "draining" // no placements; the node hibernates what it runs
	NodeDrained  = "drained"  // drain finished: nothing live runs there
	NodeLost     = "lost"     // its lease lapsed (database clock): its instances failed
)

// Member is a node of the cluster as the database knows it.
type Member struct {
	Name           string
	APIURL         string
	State          string
	Labels         map[string]string
	CPUs           float64
	MemoryBytes    int64
	DiskBytes      int64
	InstanceSlots  int // 0 = no bound
	Lease          time.Duration
	LeaseExpiresAt time.Time
	RenewedAt      time.Time
	StartedAt      time.Time
	StateChangedAt time.Time
	Version        string
	Stopped        bool // shut down gracefully; no placements until it joins again
	// TLSCert is the certificate (DER) the node's API serves; nil for
	// plain HTTP (or a node of an earlier version).
	TLSCert []byte
	// Expired: the lease lapsed by the database's clock (now()) and the
	// node is not yet marked lost.
	Expired bool
	// Live instances on the node (not Terminated, Failed or hibernated)
	// and what their limits add up to.
	Instances  int
	UsedCPUs   float64
	UsedMemory int64
	UsedDisk   int64
	// DiskRoom is the most bytes of new writable-layer limits the node
	// took at its last report (SetNodeDiskRoom); nil = never reported.
	DiskRoom *int64
	// RuntimeClasses are the runtime classes the node can run, as it
	// told at its last join; nil = not told (a node of an earlier version).
	RuntimeClasses []string
}

// Registration is what a node records at start.
type Registration struct {
	Name, APIURL, Version string
	Labels                map[string]string
	CPUs                  float64
	MemoryBytes           int64
	DiskBytes             int64
	InstanceSlots         int
	Lease                 time.Duration
	// TLSCert is the certificate (DER) the node's API serves, which the
	// other nodes trust for it; nil for plain HTTP.
	TLSCert []byte
	// RuntimeClasses are the runtime classes the node can run; nil = not
	// told (recorded as NULL).
	RuntimeClasses []string
}

// Join records node r (or replaces what an earlier start recorded) with a
// fresh lease from the database's clock. A node that was lost comes back
// ready (it has just cleaned up: its instances were failed and fenced);
// cordoned, draining and drained stay as they were, so a node restarted
// during a rolling upgrade takes no placement until uncordoned.
func (s Nodes) Join(ctx context.Context, r Registration) (Member, error) {
	labels, err := json.Marshal(nonNil(r.Labels))
	if err != nil {
		return Member{}, err
	}
	_, err = s.db.Exec(ctx, `INSERT INTO nodes (name, api_url, labels, cpus, memory_bytes, disk_bytes, instance_slots,
			lease_seconds, lease_expires_at, renewed_at, version, tls_cert, runtime_classes)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + $8 * interval '1 second', now(), $9, $10, $11)
		ON CONFLICT (name) DO UPDATE SET api_url = EXCLUDED.api_url, started_at = now(), labels = EXCLUDED.labels,
			cpus = EXCLUDED.cpus, memory_bytes = EXCLUDED.memory_bytes, disk_bytes = EXCLUDED.disk_bytes,
			instance_slots = EXCLUDED.instance_slots, lease_seconds = EXCLUDED.lease_seconds,
			lease_expires_at = EXCLUDED.lease_expires_at, renewed_at = now(), version = EXCLUDED.version, stopped = false,
			tls_cert = EXCLUDED.tls_cert, runtime_classes = EXCLUDED.runtime_classes,
			state = CASE WHEN nodes.state = 'lost' THEN 'ready' ELSE nodes.state END,
			state_changed_at = CASE WHEN nodes.state = 'lost' THEN now() ELSE nodes.state_changed_at END`,
		r.Name, r.APIURL, string(labels), r.CPUs, r.MemoryBytes, r.DiskBytes, r.InstanceSlots, r.Lease.Seconds(), r.Version, r.TLSCert, r.RuntimeClasses)
	if err != nil {
		return Member{}, translate(err, fmt.Sprintf("join node %q", r.Name))
	}
	return s.GetMember(ctx, r.Name)
}

// SetNodeDiskRoom records how many bytes of new writable-layer limits node
// takes now (Member.DiskRoom).
func (s Nodes) SetNodeDiskRoom(ctx context.Context, node string, room int64) error {
	_, err := s.db.Exec(ctx, `UPDATE nodes SET disk_room_bytes = $2 WHERE name = $1`, node, room)
	return translate(err, fmt.Sprintf("disk room of node %q", node))
}

// LeaveNode records that node shut down gracefully: no placements go
// there until it joins again. Its lease is left to run out: a node back
// within it keeps its instances.
func (s Nodes) LeaveNode(ctx context.Context, node string) error {
	_, err := s.db.Exec(ctx, `UPDATE nodes SET stopped = true WHERE name = $1`, node)
	return translate(err, fmt.Sprintf("node %q leaves", node))
}

// SetNodeCertificate records the certificate (DER) node's API serves now
// (an operator's certificate renewed on disk); ErrNotFound when the node
// never joined.
func (s Nodes) SetNodeCertificate(ctx context.Context, node string, der []byte) error {
	tag, err := s.db.Exec(ctx, `UPDATE nodes SET tls_cert = $2 WHERE name = $1`, node, der)
	if err != nil {
		return translate(err, fmt.Sprintf("record the certificate of node %q", node))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("node %q: %w", node, errdefs.ErrNotFound)
	}
	return nil
}

// NodeCertificate is the certificate (DER) node recorded for its API, nil
// when none; ErrNotFound when the node never joined.
func (s Nodes) NodeCertificate(ctx context.Context, node string) ([]byte, error) {
	var der []byte
	err := s.db.QueryRow(ctx, `SELECT tls_cert FROM nodes WHERE name = $1`, node).Scan(&der)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("node %q", node))
	}
	return der, nil
}

// ErrFenced is RenewLease's answer to a node that was marked lost: its
// instances were failed and given new generations; it must clean up and
// Join again.
var ErrFenced = errors.New("this node was marked lost")

// RenewLease extends node's lease by its lease length from the database's
// clock and returns its state (a drain asked on any node reaches it here).
// ErrFenced when the node was marked lost; ErrNotFound when it never joined.
func (s Nodes) RenewLease(ctx context.Context, node string) (string, error) {
	var state string
	err := s.db.QueryRow(ctx, `UPDATE nodes SET lease_expires_at = now() + lease_seconds * interval '1 second', renewed_at = now()
		WHERE name = $1 AND state <> 'lost' RETURNING state`, node).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := s.GetMember(ctx, node); gerr != nil {
			return "", gerr
		}
		return NodeLost, fmt.Errorf("renew the lease of node %q: %w", node, ErrFenced)
	}
	if err != nil {
		return "", translate(err, fmt.Sprintf("renew the lease of node %q", node))
	}
	return state, nil
}

// memberColumns are a node's columns and, from its live instances, their
// count and their limits added up (instances.spec's "limits").
var memberColumns = columns[Member]{
	{"n.name", func(m *Member) any { return &m.Name }},
	{"n.api_url", func(m *Member) any { return &m.APIURL }},
	{"n.state", func(m *Member) any { return &m.State }},
	{"n.labels", func(m *Member) any { return &m.Labels }},
	{"n.cpus", func(m *Member) any { return &m.CPUs }},
	{"n.memory_bytes", func(m *Member) any { return &m.MemoryBytes }},
	{"n.disk_bytes", func(m *Member) any { return &m.DiskBytes }},
	{"n.instance_slots", func(m *Member) any { return &m.InstanceSlots }},
	{"n.lease_seconds", func(m *Member) any { return fractionalSeconds{&m.Lease} }},
	{"n.lease_expires_at", func(m *Member) any { return &m.LeaseExpiresAt }},
	{"n.renewed_at", func(m *Member) any { return &m.RenewedAt }},
	{"n.started_at", func(m *Member) any { return &m.StartedAt }},
	{"n.state_changed_at", func(m *Member) any { return &m.StateChangedAt }},
	{"n.version", func(m *Member) any { return &m.Version }},
	{"n.stopped", func(m *Member) any { return &m.Stopped }},
	{"n.tls_cert", func(m *Member) any { return &m.TLSCert }},
	{"n.disk_room_bytes", func(m *Member) any { return &m.DiskRoom }},
	{"n.runtime_classes", func(m *Member) any { return &m.RuntimeClasses }},
	{"(n.state <> 'lost' AND n.lease_expires_at < now())", func(m *Member) any { return &m.Expired }},
	{"count(i.id)", func(m *Member) any { return &m.Instances }},
	{"COALESCE(sum((i.spec->'limits'->>'cpus')::float8), 0)", func(m *Member) any { return &m.UsedCPUs }},
	{"COALESCE(sum((i.spec->'limits'->>'memory_bytes')::bigint), 0)::bigint", func(m *Member) any { return &m.UsedMemory }},
	{"COALESCE(sum((i.spec->'limits'->>'disk_bytes')::bigint), 0)::bigint", func(m *Member) any { return &m.UsedDisk }},
}

// memberCols selects memberColumns from nodes as n with their live
// instances (not Terminated, Failed or hibernated); add GROUP BY n.name.
var memberCols = memberColumns.list() + ` FROM nodes n LEFT JOIN instances i ON i.node = n.name
		AND i.state NOT IN ('Terminated', 'Failed') AND i.hibernated_version IS NULL `

func scanMember(row pgx.Row) (Member, error) {
	m, err := memberColumns.scan(row)
	if err == nil && m.Labels == nil {
		m.Labels = map[string]string{}
	}
	return m, err
}

// ListMembers lists every node that ever joined, by name.
func (s Nodes) ListMembers(ctx context.Context) ([]Member, error) {
	rows, err := s.db.Query(ctx, "SELECT "+memberCols+" GROUP BY n.name ORDER BY n.name")
	if err != nil {
		return nil, translate(err, "list nodes")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) { return scanMember(r) })
	return out, translate(err, "list nodes")
}

// GetMember returns node name; ErrNotFound when it never joined.
func (s Nodes) GetMember(ctx context.Context, name string) (Member, error) {
	m, err := scanMember(s.db.QueryRow(ctx, "SELECT "+memberCols+" WHERE n.name = $1 GROUP BY n.name", name))
	if err != nil {
		return Member{}, translate(err, fmt.Sprintf("node %q", name))
	}
	return m, nil
}

// SetNodeState moves node name to state `to` if it is in one of from
// (empty: any but lost); ErrFailedPrecondition naming its state otherwise.
func (s Nodes) SetNodeState(ctx context.Context, name string, from []string, to string) (Member, error) {
	var state string
	err := s.db.QueryRow(ctx, `UPDATE nodes SET state = $2, state_changed_at = now()
		WHERE name = $1 AND (cardinality($3::text[]) = 0 AND state <> 'lost' OR state = ANY($3)) RETURNING state`,
		name, to, nonNilStrings(from)).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		m, gerr := s.GetMember(ctx, name)
		if gerr != nil {
			return Member{}, gerr
		}
		return Member{}, errdefs.WithDetails(fmt.Errorf("node %q is %s: cannot become %s: %w", name, m.State, to, errdefs.ErrFailedPrecondition),
			map[string]any{"state": m.State})
	}
	if err != nil {
		return Member{}, translate(err, fmt.Sprintf("node %q", name))
	}
	return s.GetMember(ctx, name)
}

// LostInstance is an instance failed because its node was lost.
type LostInstance struct {
	ID, Tenant, Project, Node string
	Generation                int64 // the new one: the lost node's is older
}

// MarkLost marks every node whose lease lapsed by the database's clock as
// lost and, in the same transaction, fails its live instances (not the
// hibernated ones: they live as versions and wake anywhere) with reason
// node_lost and message msg(instance), bumping their generations so that
// the lost node, if it comes back, is fenced. Nodes that race here
// serialise on the rows: one marks a node, the others see it lost. A node
// never marks itself (self): after a pause of its own it renews first.
//
// msg gets the instance's latest checkpoint (nil when none).
func (s Nodes) MarkLost(ctx context.Context, self string, msg func(in Instance, node Member, cp *InstanceCheckpoint) string) ([]Member, []LostInstance, error) {
	type result struct {
		nodes []Member
		ins   []LostInstance
	}
	r, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (result, error) {
		var res result
		rows, err := tx.Query(ctx, `UPDATE nodes SET state = 'lost', state_changed_at = now()
			WHERE state <> 'lost' AND lease_expires_at < now() AND name <> $1 RETURNING name`, self)
		if err != nil {
			return res, translate(err, "mark lost nodes")
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(names) == 0 {
			return res, translate(err, "mark lost nodes")
		}
		for _, name := range names {
			m, err := scanMember(tx.QueryRow(ctx, "SELECT "+memberCols+" WHERE n.name = $1 GROUP BY n.name", name))
			if err != nil {
				return res, translate(err, fmt.Sprintf("node %q", name))
			}
			res.nodes = append(res.nodes, m)
			ins, err := collectInstances(tx.Query(ctx, "SELECT "+instanceCols+instanceFrom+
				`WHERE i.node = $1 AND i.state NOT IN ('Terminated', 'Failed') AND i.hibernated_version IS NULL
				 ORDER BY i.id FOR UPDATE OF i`, name))
			if err != nil {
				return res, err
			}
			for _, in := range ins {
				cp, err := lostCheckpoint(ctx, tx, in.ID)
				if err != nil {
					return res, err
				}
				var gen int64
				err = tx.QueryRow(ctx, `UPDATE instances SET state = 'Failed', reason = $2, message = $3,
						generation = generation + 1, last_transition_at = now()
					WHERE id = $1 RETURNING generation`, in.ID, types.ReasonNodeLost, msg(in, m, cp)).Scan(&gen)
				if err != nil {
					return res, translate(err, fmt.Sprintf("instance %q", in.ID))
				}
				res.ins = append(res.ins, LostInstance{ID: in.ID, Tenant: in.Tenant, Project: in.Project, Node: name, Generation: gen})
			}
		}
		return res, nil
	})
	return r.nodes, r.ins, err
}

// lostCheckpoint is instance id's newest checkpoint: the newer of its
// latest periodic one (instances.checkpoint_version) and its newest
// coordinated one (a periodic one of a project with volumes, or one asked
// by POST /v1/instances/{i}/checkpoint; the latter carries the volumes);
// nil when none.
func lostCheckpoint(ctx context.Context, tx pgx.Tx, id string) (*InstanceCheckpoint, error) {
	var cv, cn, cnv *int
	var cat, cnat *time.Time
	err := tx.QueryRow(ctx, `SELECT i.checkpoint_version, i.checkpoint_at, c.number, c.version, c.created_at
		FROM instances i LEFT JOIN LATERAL (SELECT number, version, created_at FROM checkpoints
			WHERE project_id = i.project_id AND instance = i.id ORDER BY number DESC LIMIT 1) c ON true
		WHERE i.id = $1`, id).Scan(&cv, &cat, &cn, &cnv, &cnat)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("instance %q", id))
	}
	switch {
	case cn != nil && (cv == nil || *cnv >= *cv):
		return &InstanceCheckpoint{Version: *cnv, At: *cnat, Number: *cn}, nil
	case cv != nil && cat != nil:
		return &InstanceCheckpoint{Version: *cv, At: *cat}, nil
	}
	return nil, nil
}

// LostNodeOperations are the unfinished operations of lost nodes: nothing
// will run them again, so they are settled as interrupted.
func (s Operations) LostNodeOperations(ctx context.Context) ([]Operation, error) {
	rows, err := s.db.Query(ctx, "SELECT "+operationCols+` FROM operations o JOIN nodes n ON n.name = o.node
		WHERE o.state IN ('pending', 'running') AND n.state = 'lost' ORDER BY o.created_at, o.id`)
	if err != nil {
		return nil, translate(err, "operations of lost nodes")
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Operation, error) { return scanOperation(r) })
	return ops, translate(err, "operations of lost nodes")
}

// RecordImage records that node has image (repo@digest) pulled: placement
// prefers it for instances of that image.
func (s Nodes) RecordImage(ctx context.Context, node, image string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO node_images (node, image) VALUES ($1, $2)
		ON CONFLICT (node, image) DO UPDATE SET pulled_at = now()`, node, image)
	return translate(err, fmt.Sprintf("record image %q on node %q", image, node))
}

// NodesWithImage are the nodes that pulled image.
func (s Nodes) NodesWithImage(ctx context.Context, image string) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, `SELECT node FROM node_images WHERE image = $1`, image)
	if err != nil {
		return nil, translate(err, "nodes with image")
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(err, "nodes with image")
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// TenantSpread counts tenant's live instances per node.
func (s Nodes) TenantSpread(ctx context.Context, tenant string) (map[string]int, error) {
	rows, err := s.db.Query(ctx, `SELECT node, count(*) FROM instances
		WHERE tenant_id = $1 AND state NOT IN ('Terminated', 'Failed') AND hibernated_version IS NULL GROUP BY node`, tenant)
	if err != nil {
		return nil, translate(err, "tenant spread")
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var n string
		var c int
		if err := rows.Scan(&n, &c); err != nil {
			return nil, translate(err, "tenant spread")
		}
		out[n] = c
	}
	return out, translate(rows.Err(), "tenant spread")
}

// VolumeHome is where a project's volume data is.
type VolumeHome struct {
	Node       string
	ArchiveKey string // the archive holding the data as it was when it left Node; "" = none
	UpdatedAt  time.Time
}

// GetVolumeHome is the home of the volumes of tenant's project; ok false
// when no node has held them yet.
func (s Volumes) GetVolumeHome(ctx context.Context, tenant, project string) (VolumeHome, bool, error) {
	var h VolumeHome
	err := s.db.QueryRow(ctx, `SELECT h.node, h.archive_key, h.updated_at FROM volume_homes h
		JOIN projects p ON p.id = h.project_id WHERE p.tenant_id = $1 AND p.name = $2`, tenant, project).
		Scan(&h.Node, &h.ArchiveKey, &h.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return VolumeHome{}, false, nil
	}
	if err != nil {
		return VolumeHome{}, false, translate(err, fmt.Sprintf("volume home of project %q", project))
	}
	return h, true, nil
}

// SetVolumeHome records that node now holds the project's volume data;
// archiveKey is the archive that holds a copy of it ("" = none: the data
// is on node only).
func (s Volumes) SetVolumeHome(ctx context.Context, tenant, project, node, archiveKey string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO volume_homes (project_id, node, archive_key)
		SELECT id, $3, $4 FROM projects WHERE tenant_id = $1 AND name = $2
		ON CONFLICT (project_id) DO UPDATE SET node = EXCLUDED.node, archive_key = EXCLUDED.archive_key, updated_at = now()`,
		tenant, project, node, archiveKey)
	return translate(err, fmt.Sprintf("volume home of project %q", project))
}

// SetPlacement records why instance id runs where it does.
func (s Instances) SetPlacement(ctx context.Context, id, placement string) error {
	_, err := s.db.Exec(ctx, `UPDATE instances SET placement = $2 WHERE id = $1`, id, placement)
	return translate(err, fmt.Sprintf("instance %q", id))
}

// Placement is why instance id runs where it does ("" = not recorded).
func (s Instances) Placement(ctx context.Context, id string) (string, error) {
	var p string
	err := s.db.QueryRow(ctx, `SELECT placement FROM instances WHERE id = $1`, id).Scan(&p)
	return p, translate(err, fmt.Sprintf("instance %q", id))
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
