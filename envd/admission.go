package envd

import (
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/limiter"
)

// TenantLimits bound the concurrent work one tenant may hold on this node;
// past a limit a request is refused with errdefs.ErrResourceExhausted (HTTP
// 429 with Retry-After). 0 = the default, negative = unlimited.
type TenantLimits struct {
	Saves  int // default 4
	Builds int // default 2
	Exec   int // default 32
	Events int // default 32

	SFTP     int // default 8
	Archives int // default 4
	// Per node, all tenants together.
	SFTPPerNode     int // default 256
	ArchivesPerNode int // default 64
}

// DefaultTenantLimits are the node defaults.
var DefaultTenantLimits = TenantLimits{Saves: 4, Builds: 2, Exec: 32, Events: 32,
	SFTP: 8, Archives: 4, SFTPPerNode: 256, ArchivesPerNode: 64}

func newLimiter(l TenantLimits) *limiter.Limiter {
	pick := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	d := DefaultTenantLimits
	// Operations take a while, streams come and go quickly.
	return limiter.New(map[string]limiter.Limit{
		types.AdmitSaves:  {Max: pick(l.Saves, d.Saves), RetryAfter: 10 * time.Second},
		types.AdmitBuilds: {Max: pick(l.Builds, d.Builds), RetryAfter: 30 * time.Second},
		types.AdmitExec:   {Max: pick(l.Exec, d.Exec), RetryAfter: 2 * time.Second},
		types.AdmitEvents: {Max: pick(l.Events, d.Events), RetryAfter: 2 * time.Second},

		types.AdmitSFTP:     {Max: pick(l.SFTP, d.SFTP), NodeMax: pick(l.SFTPPerNode, d.SFTPPerNode), RetryAfter: 5 * time.Second},
		types.AdmitArchives: {Max: pick(l.Archives, d.Archives), NodeMax: pick(l.ArchivesPerNode, d.ArchivesPerNode), RetryAfter: 5 * time.Second},
	})
}

// Admit takes one slot of kind (types.AdmitExec, types.AdmitEvents, ...) for p's tenant
// and returns its release, which the caller must call when the work ends,
// on every path. Saves and builds are admitted by Save and Build
// themselves, for as long as their operation runs.
func (s *Service) Admit(p types.Principal, kind string) (release func(), err error) {
	if err := s.admitThreads(); err != nil {
		return nil, err
	}
	return s.limiter().Acquire(p.Tenant, kind)
}

// limiter is built on first use, so a Service made without New's help (a
// test's) still works.
func (s *Service) limiter() *limiter.Limiter {
	s.limitsOnce.Do(func() { s.limits = newLimiter(s.cfg.Limits) })
	return s.limits
}

// opAdmission maps an operation kind to the limit it counts against.
var opAdmission = map[types.OpKind]string{types.OpKindSave: types.AdmitSaves, types.OpKindBuild: types.AdmitBuilds, types.OpKindCheckpoint: types.AdmitSaves}

// opAdmitter admits operations against the tenant limits (ops.Admission).
type opAdmitter struct{ s *Service }

func (a opAdmitter) AdmitOp(tenant string, kind types.OpKind) (release func(), err error) {
	adm, ok := opAdmission[kind]
	if !ok {
		release = func() {}
	} else if err = a.s.admitThreads(); err != nil {
		return nil, err
	} else if release, err = a.s.limiter().Acquire(tenant, adm); err != nil {
		return nil, err
	}
	return a.s.countInteractive(kind, release), nil
}

// AdmissionInUse is how many slots of kind tenant holds on this node now.
func (s *Service) AdmissionInUse(tenant, kind string) int {
	return s.limiter().InUse(tenant, kind)
}
