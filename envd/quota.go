package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Quotas are checked before anything is made: an instance before it is
// recorded (atomically, in the store), a save after its layer is encoded
// and before it is uploaded, a volume before it is declared. A refusal is
// errdefs.ErrQuotaExceeded (507) with the numbers in its details.

// ttlFor turns a requested TTL into an expiry within the node's and the
// tenant's maximum. Past the tenant's, or "none" while it has one, is a
// quota refusal; the default is cut to it.
func (s *Service) ttlFor(ctx context.Context, tenant, ttl string) (*time.Time, error) {
	q, err := s.store.Quota(ctx, tenant)
	if err != nil {
		return nil, err
	}
	def := s.cfg.DefaultTTL
	if q.MaxTTL > 0 {
		if ttl == "none" {
			return nil, versions.QuotaError("ttl_seconds", int64(q.MaxTTL/time.Second), 0, -1)
		}
		if d, err := time.ParseDuration(ttl); err == nil && d > q.MaxTTL {
			return nil, versions.QuotaError("ttl_seconds", int64(q.MaxTTL/time.Second), 0, int64(d/time.Second))
		}
		def = min(def, q.MaxTTL)
	}
	return parseTTL(ttl, time.Now(), def, s.cfg.MaxTTL)
}

// checkStartQuota refuses to start one more live instance beyond the
// tenant's quota: an early check, before an operation exists; the store
// checks again, atomically, as it records a new instance or starts a
// stopped one.
func (s *Service) checkStartQuota(ctx context.Context, tenant string) error {
	q, err := s.store.Quota(ctx, tenant)
	if err != nil || q.MaxInstances == 0 {
		return err
	}
	u, err := s.store.Usage(ctx, tenant)
	if err != nil {
		return err
	}
	if u.Instances >= q.MaxInstances {
		return versions.QuotaError("instances", int64(q.MaxInstances), int64(u.Instances), 1)
	}
	return nil
}

// checkSaveQuota refuses a version of project adding layerBytes beyond the
// tenant's quota of versions per project or of stored bytes. It is the
// early check, before an upload; the commit checks again atomically
// (versions.Commit.Quota), counting the volume bytes returned here.
func (s *Service) checkSaveQuota(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error) {
	q, err := s.store.Quota(ctx, tenant)
	if err != nil || (q.MaxVersions == 0 && q.MaxStoredBytes == 0) {
		return 0, err
	}
	u, err := s.usage(ctx, tenant)
	if err != nil {
		return 0, err
	}
	if q.MaxVersions > 0 && u.versions[project] >= q.MaxVersions {
		return 0, versions.QuotaError("versions", int64(q.MaxVersions), int64(u.versions[project]), 1)
	}
	if q.MaxStoredBytes > 0 && u.stored()+layerBytes > q.MaxStoredBytes {
		return 0, versions.QuotaError("stored_bytes", q.MaxStoredBytes, u.stored(), layerBytes)
	}
	return u.volumeBytes, nil
}

// checkVolumeQuota refuses volumes of addBytes beyond the tenant's stored
// bytes.
func (s *Service) checkVolumeQuota(ctx context.Context, tenant string, addBytes int64) error {
	q, err := s.store.Quota(ctx, tenant)
	if err != nil || q.MaxStoredBytes == 0 {
		return err
	}
	u, err := s.usage(ctx, tenant)
	if err != nil {
		return err
	}
	if u.stored()+addBytes > q.MaxStoredBytes {
		return versions.QuotaError("stored_bytes", q.MaxStoredBytes, u.stored(), addBytes)
	}
	return nil
}

type tenantUsage struct {
	versions.Usage
	versions    map[string]int
	volumeBytes int64
	diskBytes   int64 // writable-layer limits of instances holding a layer
}

func (u tenantUsage) stored() int64 { return u.LayerBytes + u.volumeBytes + u.diskBytes }

// usage is the store's usage plus the declared sizes of the tenant's
// volumes, which live in project specs.
func (s *Service) usage(ctx context.Context, tenant string) (tenantUsage, error) {
	u, err := s.store.Usage(ctx, tenant)
	if err != nil {
		return tenantUsage{}, err
	}
	out := tenantUsage{Usage: u, versions: u.Versions}
	if out.diskBytes, err = s.store.WritableLayerBytes(ctx, tenant); err != nil {
		return tenantUsage{}, err
	}
	ps, err := s.store.ListProjects(ctx, tenant)
	if err != nil {
		return tenantUsage{}, err
	}
	for _, p := range ps {
		spec, _ := parseProjectSpec(p.Spec)
		out.volumeBytes += volumeBytes(spec.Volumes)
	}
	return out, nil
}

// SetQuota sets a tenant's quota (admin only); zero fields are no limit.
func (s *Service) SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error) {
	if !p.Admin {
		return types.Quota{}, fmt.Errorf("quotas need an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("tenant", tenant); err != nil {
		return types.Quota{}, err
	}
	var ttl time.Duration
	if q.MaxTTL != "" {
		var err error
		if ttl, err = time.ParseDuration(q.MaxTTL); err != nil || ttl <= 0 {
			return types.Quota{}, fmt.Errorf("max_ttl %q: a positive Go duration: %w", q.MaxTTL, errdefs.ErrInvalidArgument)
		}
	}
	stored, err := s.store.SetQuota(ctx, tenant, versions.Quota{MaxInstances: q.MaxInstances, MaxVersions: q.MaxVersions,
		MaxStoredBytes: q.MaxStoredBytes, MaxTTL: ttl})
	if err != nil {
		return types.Quota{}, err
	}
	maxima, err := s.setLimitMaxima(ctx, tenant, q)
	if err != nil {
		return types.Quota{}, err
	}
	return withMaxima(toQuota(stored), maxima), nil
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
	u, err := s.usage(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	q, err := s.store.Quota(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	maxima, err := s.store.LimitMaxima(ctx, tenant)
	if err != nil {
		return types.Usage{}, err
	}
	out := types.Usage{Tenant: tenant, Instances: u.Instances, StoredBytes: u.stored(), VersionBytes: u.LayerBytes,
		VolumeBytes: u.volumeBytes, DiskBytes: u.diskBytes, Versions: u.versions, Quota: withMaxima(toQuota(q), maxima)}
	return out, nil
}

// CreateToken creates an API token of tenant (admin only), creating the
// tenant if needed. The token is shown once.
func (s *Service) CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	if !p.Admin {
		return types.Token{}, fmt.Errorf("creating tokens needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("tenant", tenant); err != nil {
		return types.Token{}, err
	}
	if imageRepo("") == projectRepo(tenant, "") {
		return types.Token{}, fmt.Errorf("tenant %q: reserved (its repositories would be the base images'): %w", tenant, errdefs.ErrInvalidArgument)
	}
	ttl, err := tokenLifetime(req.ExpiresIn)
	if err != nil {
		return types.Token{}, err
	}
	tok, info, err := s.store.NewToken(ctx, tenant, req.Admin, ttl)
	if err != nil {
		return types.Token{}, err
	}
	return types.Token{Tenant: tenant, Token: tok, Admin: req.Admin, ID: info.ID, CreatedAt: info.CreatedAt, ExpiresAt: info.ExpiresAt}, nil
}

func volumeBytes(vs []types.Volume) int64 {
	var n int64
	for _, v := range vs {
		n += v.SizeBytes
	}
	return n
}
