package versions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// LimitMaxima are a tenant's maxima of per-instance resource limits; a
// zero field is no maximum.
type LimitMaxima struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64
	DiskBytes   int64
	// RuntimeClasses are the runtime classes the tenant's projects and
	// instances may use; empty = any (migration 0032).
	RuntimeClasses []string
}

// SetLimitMaxima sets tenant's maxima, creating the tenant if needed.
func (s Tenants) SetLimitMaxima(ctx context.Context, tenant string, m LimitMaxima) error {
	if m.MemoryBytes < 0 || m.Pids < 0 || m.CPUs < 0 || m.DiskBytes < 0 {
		return fmt.Errorf("limit maxima of %q: negative maximum: %w", tenant, errdefs.ErrInvalidArgument)
	}
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return err
		}
		var classes []string // NULL: any
		if len(m.RuntimeClasses) > 0 {
			classes = m.RuntimeClasses
		}
		_, err := tx.Exec(ctx, `UPDATE tenants SET max_memory_bytes = NULLIF($2::bigint, 0), max_pids = NULLIF($3::bigint, 0),
			max_cpus = NULLIF($4::double precision, 0), max_disk_bytes = NULLIF($5::bigint, 0), runtime_classes = $6::text[] WHERE id = $1`,
			tenant, m.MemoryBytes, m.Pids, m.CPUs, m.DiskBytes, classes)
		return translate(err, fmt.Sprintf("limit maxima of %q", tenant))
	})
}

// LimitMaxima returns tenant's maxima; a tenant without a row has none.
func (s Tenants) LimitMaxima(ctx context.Context, tenant string) (LimitMaxima, error) {
	var (
		mem, pids, disk *int64
		cpus            *float64
		classes         []string
	)
	err := s.db.QueryRow(ctx, "SELECT max_memory_bytes, max_pids, max_cpus, max_disk_bytes, runtime_classes FROM tenants WHERE id = $1", tenant).
		Scan(&mem, &pids, &cpus, &disk, &classes)
	if errors.Is(err, pgx.ErrNoRows) {
		return LimitMaxima{}, nil
	}
	if err != nil {
		return LimitMaxima{}, translate(err, fmt.Sprintf("limit maxima of %q", tenant))
	}
	m := LimitMaxima{RuntimeClasses: classes}
	if mem != nil {
		m.MemoryBytes = *mem
	}
	if pids != nil {
		m.Pids = *pids
	}
	if cpus != nil {
		m.CPUs = *cpus
	}
	if disk != nil {
		m.DiskBytes = *disk
	}
	return m, nil
}

// WritableLayerBytes is the sum of the writable-layer limits (instance
// spec key limits.disk_bytes) of tenant's instances that hold a writable
// layer on a node: all but terminated and hibernated ones.
func (s Tenants) WritableLayerBytes(ctx context.Context, tenant string) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, `SELECT COALESCE(sum((spec->'limits'->>'disk_bytes')::bigint), 0)::bigint FROM instances
		WHERE tenant_id = $1 AND state <> 'Terminated' AND hibernated_version IS NULL`, tenant).Scan(&n)
	return n, translate(err, fmt.Sprintf("writable layers of %q", tenant))
}
