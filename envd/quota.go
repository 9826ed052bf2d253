package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// The checks of a tenant's quota are in envd/quota; what is here sets and
// reports it.

// SetQuota sets a tenant's quota (admin only); zero fields are no limit.
func (s *Service) SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error) {
	if !p.Admin {
		return types.Quota{}, fmt.Errorf("quotas need an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("tenant", tenant); err != nil {
		return types.Quota{}, err
	}
	// Before anything is written: a refused quota changes nothing.
	classes, err := spec.ParseClasses(q.RuntimeClasses)
	if err != nil {
		return types.Quota{}, err
	}
	q.RuntimeClasses = classes
	var ttl time.Duration
	if q.MaxTTL != "" {
		var err error
		if ttl, err = time.ParseDuration(q.MaxTTL); err != nil || ttl <= 0 {
			return types.Quota{}, fmt.Errorf("max_ttl %q: a positive Go duration: %w", q.MaxTTL, errdefs.ErrInvalidArgument)
		}
	}
	stored, err := s.store.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: q.MaxInstances, MaxVersions: q.MaxVersions,
		MaxStoredBytes: q.MaxStoredBytes, MaxTTL: ttl})
	if err != nil {
		return types.Quota{}, err
	}
	maxima, err := s.setLimitMaxima(ctx, tenant, q)
	if err != nil {
		return types.Quota{}, err
	}
	idleMax, err := s.setIdleMax(ctx, tenant, q)
	if err != nil {
		return types.Quota{}, err
	}
	return withIdleMax(withMaxima(toQuota(stored), maxima), idleMax), nil
}

func toQuota(q versions.Quota) types.Quota {
	out := types.Quota{MaxInstances: q.MaxInstances, MaxVersions: q.MaxVersions, MaxStoredBytes: q.MaxStoredBytes}
	if q.MaxTTL > 0 {
		out.MaxTTL = q.MaxTTL.String()
	}
	return out
}

// Usage reports what a tenant uses and its quota: tenant "" is the
// caller's own; another tenant's needs an admin token.
func (s *Service) Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error) {
	if tenant == "" {
		tenant = p.Tenant
	}
	if tenant != p.Tenant && !p.Admin {
		return types.Usage{}, fmt.Errorf("another tenant's usage needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("tenant", tenant); err != nil {
		return types.Usage{}, err
	}
	u, err := s.quota.Usage(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	q, err := s.store.Tenants.Quota(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	maxima, err := s.store.Tenants.LimitMaxima(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	idleMax, err := s.store.Tenants.MaxIdleAfter(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	out := types.Usage{Tenant: tenant, Instances: u.Instances, StoredBytes: u.Stored(), VersionBytes: u.LayerBytes,
		VolumeBytes: u.VolumeBytes, DiskBytes: u.DiskBytes, Versions: u.Versions, Quota: withIdleMax(withMaxima(toQuota(q), maxima), idleMax),
		CheckpointBytes: u.CheckpointBytes}
	return out, nil
}
