package envd

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/envd/rollout"
	"github.com/envd-dev/envd/envd/views"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// wireRollouts makes the rollout runner (envd/rollout).
func (s *Service) wireRollouts(ctx context.Context) {
	s.rollouts = rollout.New(rollout.Deps{Store: rolloutStore{s.store.Rollouts, s.store.Operations, s.store.Projects, s.store.Versions}, Migrator: s.builds, Reg: s.reg, Bases: bases{s}, Ops: s.ops,
		Trials: s.life, Interactive: s, Log: s.log, Stopping: ctx, Concurrency: s.cfg.RolloutConcurrency,
		CrashPoint: s.cfg.RolloutCrashPoint})
}

// interactiveKinds are the operations a rollout yields to.
var interactiveKinds = map[types.OpKind]bool{types.OpKindSave: true, types.OpKindRestore: true, types.OpKindBuild: true}

// countInteractive counts an admitted operation of kind among the node's
// interactive work until release.
func (s *Service) countInteractive(kind types.OpKind, release func()) func() {
	if !interactiveKinds[kind] {
		return release
	}
	s.interactive.Add(1)
	return func() {
		s.interactive.Add(-1)
		release()
	}
}

// InteractiveInFlight is how many saves, restores and builds run on this
// node now (rollout.Interactive).
func (s *Service) InteractiveInFlight() int { return int(s.interactive.Load()) }

// SetProjectValidation replaces the commands every migration of the
// project runs in its trial instance (a rollout's included).
func (s *Service) SetProjectValidation(ctx context.Context, p types.Principal, project string, req types.ProjectValidation) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	for _, c := range req.Validate {
		if len(c) == 0 || c[0] == "" {
			return types.Project{}, fmt.Errorf("validate: an empty command: %w", errdefs.ErrInvalidArgument)
		}
	}
	proj, err := s.store.Projects.SetProjectValidation(ctx, p.Tenant, project, req.Validate)
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// currentBase names the imported base the project's current version sits
// on ("" when none is found: the answer is informative, never an error).
func (s *Service) currentBase(ctx context.Context, p versions.Project) string {
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, p.Name, p.Current)
	if err != nil {
		return ""
	}
	imgs, err := s.store.Content.ListImages(ctx)
	if err != nil {
		return ""
	}
	// The answer follows from the version's image and the imported images,
	// all named by digest: it is cached on them, so that reading a project
	// costs two queries, not a registry round trip per imported image.
	var key strings.Builder
	key.WriteString(v.Image)
	for _, im := range imgs {
		key.WriteString("|" + im.Name + "=" + im.Repo + "@" + im.Digest)
	}
	if b, ok := s.bases.get(key.String()); ok {
		return b
	}
	img, err := s.reg.Get(ctx, v.Image)
	if err != nil {
		return ""
	}
	bases, err := s.builds.Bases(ctx)
	if err != nil {
		return ""
	}
	out := ""
	if b, ok := builder.PickBase(bases, img); ok {
		out = b.Name + " (" + b.Ref() + ")"
	}
	s.bases.put(key.String(), out)
	return out
}

// baseCache keeps currentBase's answers by their inputs (immutable), at
// most 4096, dropped all at once when full.
type baseCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *baseCache) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *baseCache) put(k, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 4096 {
		c.m = map[string]string{}
	}
	c.m[k] = v
}

// newerCurrent is the project's current version when it is a migration
// the instance neither runs nor saved (0 otherwise).
func (s *Service) newerCurrent(ctx context.Context, tenant string, in types.Instance) int {
	p, err := s.store.Projects.GetProject(ctx, tenant, in.Project)
	if err != nil || p.Current == in.Version || p.Current == in.LastSavedVersion || p.Current == 0 {
		return 0
	}
	v, err := s.store.Versions.GetVersion(ctx, tenant, in.Project, p.Current)
	if err != nil || v.Kind != "migration" {
		return 0
	}
	return v.Number
}
