package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// SquashClaim is a version a node took to squash.
type SquashClaim struct {
	Tenant, Project string
	Number          int
	Image           string // repo@digest, as claimed
	Layers          int
	Prefetch        []string // the project's first-read paths, first in an eStargz layer
}

// ClaimSquash takes the oldest ready version with more than minLayers
// layers that is current or that a live instance runs from or sits on (the
// versions new instances and saves build on; an old version is squashed
// once it is current again) and that no node is squashing (a claim older than stale is taken
// over), for the caller to squash. None is errdefs.ErrNotFound. Claims
// never block each other: a version another node is claiming right now is
// skipped.
func (s Versions) ClaimSquash(ctx context.Context, minLayers int, stale time.Duration) (SquashClaim, error) {
	var c SquashClaim
	err := s.db.QueryRow(ctx, `UPDATE versions v SET squash_started_at = now()
		FROM projects p
		WHERE p.id = v.project_id AND (v.project_id, v.number) = (
			SELECT c.project_id, c.number FROM versions c JOIN projects cp ON cp.id = c.project_id
			WHERE c.state = 'ready' AND c.layers > $1 AND c.image <> ''
			  AND (c.squash_started_at IS NULL OR c.squash_started_at < now() - make_interval(secs => $2))
			  AND (c.number = cp.current_version OR EXISTS (SELECT 1 FROM instances i
				WHERE i.project_id = c.project_id AND i.state NOT IN ('Terminated', 'Failed')
				  AND (i.version = c.number OR i.layer_version = c.number)))
			ORDER BY c.created_at LIMIT 1 FOR UPDATE OF c SKIP LOCKED)
		RETURNING p.tenant_id, p.name, v.number, v.image, v.layers, p.prefetch`, minLayers, stale.Seconds()).
		Scan(&c.Tenant, &c.Project, &c.Number, &c.Image, &c.Layers, &c.Prefetch)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("no version deeper than %d layers to squash: %w", minLayers, errdefs.ErrNotFound)
	}
	if err != nil {
		return c, translate(err, "claim a squash")
	}
	return c, nil
}

// FinishSquash records, for an image pushed under this lease, that
// version c now has image (layers deep), the squash of c.Image, and ends
// the claim. The version must still be ready with c.Image: otherwise
// (collected meanwhile, or squashed by another node) it is
// errdefs.ErrConflict and nothing changes; a sweep during the upload is
// ErrUnavailable, as for CommitVersion.
func (u *Upload) FinishSquash(ctx context.Context, c SquashClaim, image string, layers int) error {
	return WithTx(ctx, u.db, func(tx pgx.Tx) error {
		if err := u.check(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE versions v SET image = $4, layers = $5, squashed_from = v.image, squash_started_at = NULL
			FROM projects p
			WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3
			  AND v.image = $6 AND v.state = 'ready'`, c.Tenant, c.Project, c.Number, image, layers, c.Image)
		if err != nil {
			return translate(err, fmt.Sprintf("version %d of %q", c.Number, c.Project))
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("version %d of %q no longer has image %s: %w", c.Number, c.Project, c.Image, errdefs.ErrConflict)
		}
		return nil
	})
}

// ReleaseSquash ends a claim without squashing, so that the version may be
// taken again at once. A failed squash does not call it: its claim stays
// until it is stale, so a version that cannot be squashed is not retried
// in a loop.
func (s Versions) ReleaseSquash(ctx context.Context, c SquashClaim) error {
	_, err := s.db.Exec(ctx, `UPDATE versions v SET squash_started_at = NULL FROM projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3`, c.Tenant, c.Project, c.Number)
	return translate(err, fmt.Sprintf("version %d of %q", c.Number, c.Project))
}
